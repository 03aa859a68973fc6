#!/bin/sh
# netns.sh runs a command in the network namespace it is started in (use it as
# `unshare -n bench/netns.sh make bench`): its own loopback and ports, so the local
# stack does not collide with another one on this machine (the in-memory provider's
# ports are fixed), plus a default route so that kube-apiserver finds an address.
set -e
ip link set lo up
ip addr add 10.200.0.1/32 dev lo
ip route add default via 10.200.0.1 dev lo onlink 2>/dev/null || ip route add default dev lo
exec "$@"
