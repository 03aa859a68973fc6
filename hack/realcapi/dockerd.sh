#!/usr/bin/env bash
# dockerd.sh runs a Docker engine for the real Cluster API lane (make e2e-real) in a
# network namespace of its own, without systemd: its own config, data root, exec root,
# socket and cgroup parent, so that it and everything it creates (the `kind` network,
# node and load-balancer containers, their iptables rules) go with `down`. The
# lane's management processes run in the same network namespace (`run`), where the
# node containers' addresses are reachable.
#
# usage (root):
#   dockerd.sh up          start dockerd (idempotent) and create the kind network
#   dockerd.sh run <cmd>   run a command in the engine's network namespace with
#                          DOCKER_HOST set
#   dockerd.sh down        stop dockerd, remove its containers, volumes, namespace
#
# REALCAPI_STATE (default _artifacts/realcapi) holds the engine's logs; REALCAPI_CACHE
# (default _cache/realcapi) its data root, so that built images outlive `down`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=${REALCAPI_STATE:-$root/_artifacts/realcapi}
cache=${REALCAPI_CACHE:-$root/_cache/realcapi}
netns=capi-real
run_dir=/run/capi-real
sock=$run_dir/docker.sock
export DOCKER_HOST=unix://$sock
docker=/usr/bin/docker

log() { printf '==> realcapi: %s\n' "$*" >&2; }
die() { printf 'realcapi: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root"

in_ns() { nsenter --net=/run/netns/$netns -- "$@"; }

alive() { [[ -f $run_dir/dockerd.pid ]] && kill -0 "$(cat "$run_dir/dockerd.pid")" 2>/dev/null; }

# lacks_sys_resource: the bounding set of this process lacks CAP_SYS_RESOURCE (24),
# as in the restricted sandboxes the lane runs in; see runcwrap.
lacks_sys_resource() {
	local bnd; bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
	(( (16#$bnd >> 24 & 1) == 0 ))
}

# Every node container runs systemd, containerd and the kubelet, each holding inotify
# instances of the machine's one per-user budget; at the kernel's default of 128, the
# tenth or so node's systemd exits at once (Docker: exit 255) and its Machine never
# gets a node. kind documents the same limit for many nodes; raise it to its figure,
# never lower it.
raise_inotify() {
	local key want have
	for key in fs.inotify.max_user_instances:512 fs.inotify.max_user_watches:524288; do
		want=${key#*:} key=${key%%:*}
		have=$(sysctl -n "$key")
		if (( have < want )); then
			sysctl -qw "$key=$want" || die "cannot raise $key to $want (it is $have): the lane's nodes need it"
			log "raised $key from $have to $want"
		fi
	done
}

up() {
	if alive; then return 0; fi
	command -v dockerd >/dev/null || die "dockerd missing (hack/install-deps.sh installs docker.io)"
	mkdir -p "$cache/docker" "$run_dir" "$state/log"
	if ! ip netns list | grep -qw "$netns"; then
		ip netns add "$netns"
	fi
	in_ns ip link set lo up
	raise_inotify
	local runtime=""
	if lacks_sys_resource; then
		# Only in sandboxes whose bounding set lacks CAP_SYS_RESOURCE (runcwrap's doc).
		go build -o "$run_dir/runcwrap" "$root/hack/realcapi/runcwrap"
		runtime=$(printf ',"runtimes": {"runcwrap": {"path": "%s"}}, "default-runtime": "runcwrap"' "$run_dir/runcwrap")
		log "bounding set lacks CAP_SYS_RESOURCE: runc runs through runcwrap"
	fi
	cat >"$run_dir/daemon.json" <<JSON
{"data-root": "$cache/docker", "exec-root": "$run_dir/exec", "pidfile": "$run_dir/dockerd.pid",
 "hosts": ["$DOCKER_HOST"], "cgroup-parent": "capi-real", "storage-driver": "overlay2",
 "log-driver": "json-file", "log-opts": {"max-size": "20m"}$runtime}
JSON
	# nsenter, not `ip netns exec`: the latter remounts /sys, and dockerd then fails
	# with "Devices cgroup isn't mounted".
	in_ns setsid dockerd --config-file "$run_dir/daemon.json" >>"$state/log/dockerd.log" 2>&1 </dev/null &
	local i
	for i in $(seq 150); do $docker version >/dev/null 2>&1 && break; sleep 0.2; done
	$docker version >/dev/null 2>&1 || die "dockerd did not start (see $state/log/dockerd.log)"
	# Cluster API's Docker provider puts its containers on the network named kind.
	$docker network inspect kind >/dev/null 2>&1 || $docker network create kind --subnet 172.18.0.0/16 --gateway 172.18.0.1 >/dev/null
	# A default route (onto the kind bridge; nothing leaves the namespace anyway): a
	# kube-apiserver picks its advertise address from it and refuses to start without.
	local bridge; bridge=br-$($docker network inspect -f '{{.Id}}' kind | cut -c1-12)
	in_ns ip route replace default dev "$bridge"
	log "dockerd up in network namespace $netns ($DOCKER_HOST)"
}

# unmount_under detaches every mount at or below dir, deepest first.
unmount_under() {
	local dir=$1 m
	awk -v dir="$dir" '$2 == dir || index($2, dir "/") == 1 {print $2}' /proc/self/mounts | sort -r |
		while read -r m; do umount -l "$m" || die "cannot unmount $m"; done
}

down() {
	if alive; then
		local ids
		ids=$($docker ps -aq 2>/dev/null || true)
		[[ -z $ids ]] || $docker rm -f $ids >/dev/null 2>&1 || true
		$docker volume prune -f >/dev/null 2>&1 || true
		local p; p=$(cat "$run_dir/dockerd.pid")
		kill "$p" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	fi
	# Whatever is left in the namespace (the lane's management processes, shims).
	if [[ -e /run/netns/$netns ]]; then
		local net q pids=()
		net=$(readlink /proc/self/ns/net)
		local nsid; nsid=$(stat -L -c %i /run/netns/$netns)
		for q in /proc/[0-9]*; do
			[[ $(stat -L -c %i "$q/ns/net" 2>/dev/null) == "$nsid" ]] && pids+=("${q#/proc/}")
		done
		[[ ${#pids[@]} -eq 0 ]] || kill -9 "${pids[@]}" 2>/dev/null || true
		ip netns del "$netns" 2>/dev/null || true
	fi
	find /sys/fs/cgroup/*/capi-real -depth -type d -exec rmdir {} + 2>/dev/null || true
	# A dockerd killed before it cleaned up leaves mounts behind: its containers'
	# network namespaces under the exec root (rm cannot remove a mount point) and
	# their overlay roots under the data root. Detach them, deepest first.
	unmount_under "$run_dir"
	unmount_under "$cache/docker"
	# Docker creates the bind source /lib/modules for the node containers where the
	# host has none.
	rm -rf "$run_dir"
	log "dockerd down"
}

cmd=${1:-}
shift || true
case $cmd in
up) up ;;
down) down ;;
run) alive || die "dockerd is down (dockerd.sh up)"; DOCKER_HOST=$DOCKER_HOST in_ns "$@" ;;
*) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
