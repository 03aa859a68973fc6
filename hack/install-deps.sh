#!/usr/bin/env bash
# install-deps.sh installs the Debian packages that tests run for real: the OS
# image tools the backends drive. Skips apt entirely when everything is present.
set -euo pipefail

packages=()
need() { # need <command> <package>
	command -v "$1" >/dev/null 2>&1 || packages+=("$2")
}
need ostree ostree                # backend/ostree: throwaway repo and sysroot
need chattr e2fsprogs             # ostree marks deployments immutable; tests undo it to clean up
need rauc rauc                    # backend/rauc: bundles, install, slot status
need mksquashfs squashfs-tools    # rauc bundle
need dbus-daemon dbus             # rauc service on a private bus
need openssl openssl              # signing keys for rauc, swupdate and mender tests
need swupdate swupdate            # backend/swupdate
need fw_setenv libubootenv-tool   # U-Boot environment in a file (swupdate A/B switching)
need mender mender-client         # backend/mender (client 3.x)
need mender-artifact mender-artifact
# promtool checks and unit-tests config/prometheus (make test). Debian's package, not
# a build from github.com/prometheus/prometheus: that cold build took 29 min on the
# 2-core build machine (docs/metrics.md), over CI's time budget.
need promtool prometheus
need losetup mount                # loop devices as Mender A/B partitions
# The real-node lane (hack/realnode, make e2e-node): a container runtime and what
# kubeadm's preflight checks and the kubelet need on a node.
need containerd containerd
need runc runc
[[ -x /usr/lib/cni/bridge ]] || packages+=(containernetworking-plugins)
need iptables iptables
need conntrack conntrack
need socat socat
need ethtool ethtool
need ebtables ebtables
need ip iproute2
need nsenter util-linux
# The real Cluster API lane (hack/realcapi, make e2e-real): a Docker engine for
# Cluster API's Docker provider, and Debian root filesystems for its node and load
# balancer images.
need dockerd docker.io
need mmdebstrap mmdebstrap
# The OS image lane (hack/osimage, make e2e-os): QEMU under software emulation,
# UEFI firmware, GRUB's EFI loader and tools, the EFI system partition's tools.
need qemu-system-x86_64 qemu-system-x86
[[ -f /usr/share/OVMF/OVMF_CODE_4M.fd ]] || packages+=(ovmf)
[[ -d /usr/lib/grub/x86_64-efi ]] || packages+=(grub-efi-amd64-bin)
need grub-editenv grub-common
need mcopy mtools
need mkfs.vfat dosfstools
need sfdisk fdisk

if [[ ${#packages[@]} -eq 0 ]]; then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "install-deps: need root to install: ${packages[*]}" >&2
	# In CI the backend tests must run, so a missing tool is an error there; on a
	# developer's machine the tests that need it skip and say so.
	if [[ -n ${CI:-} ]]; then
		exit 1
	fi
	echo "install-deps: continuing; the backend tests that need them will skip" >&2
	exit 0
fi
echo "install-deps: installing ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
