#!/usr/bin/env bash
# node.sh runs real kubeadm nodes on this machine without a VM, Docker or systemd:
# each node is a holder process owning new mount, network and UTS namespaces, with
# its own /etc, /usr and /var (overlays over the host's, upper layers in the node's
# state directory), its own /run, containerd (cgroupfs driver), a supervised kubelet
# playing kubelet.service, and an address on the lane's switch. Nothing on the host
# changes but a veth (10.250.0.1) and cgroups under realnode-*, both gone at `down`.
#
# usage (root):
#   node.sh switch-up | switch-down
#   node.sh up <node> <ip> <pod-cidr> <version>   start the node's namespaces,
#                                                  containerd and kubelet service;
#                                                  install kubeadm/kubelet <version>
#   node.sh init <node> <ip> <version>             kubeadm init (control plane)
#   node.sh join <node> <ip> <control-plane ip>    kubeadm join (worker)
#   node.sh exec <node> <command...>               run a command on the node
#   node.sh route <node> <cidr> <via>              route another node's pod CIDR
#   node.sh down <node>                            kill everything, remove state
#   node.sh pid <node>                             the holder's PID (for nsenter)
#   node.sh down-all                               down every node left in the state
#                                                  directory, then the switch (make
#                                                  e2e-node runs it however the test ends)
#
# REALNODE_STATE (default _artifacts/realnode) holds each node's state and logs;
# REALNODE_CACHE (default _cache/realnode) holds hack/realnode/build.sh's output.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=${REALNODE_STATE:-$root/_artifacts/realnode}
cache=${REALNODE_CACHE:-$root/_cache/realnode}
subnet_prefix=10.250.0
host_ip=$subnet_prefix.1
# The lane's registry mirror of registry.k8s.io (test/e2enode serves the target
# release's images there): a node starts with its own release's images only, so
# the upgrade's images come over the network, as on a real fleet.
registry_mirror=http://$host_ip:5123
host_if=rnlane0

log() { printf '==> realnode: %s\n' "$*" >&2; }
die() { printf 'realnode: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (namespaces, mounts, cgroups)"

pid_of() { cat "$state/$1/pid" 2>/dev/null || true; }
alive() { local p; p=$(pid_of "$1"); [[ -n $p && -d /proc/$p ]]; }
in_node() { local n=$1; shift; nsenter -t "$(pid_of "$n")" -m -n -u -- "$@"; }

# The switch: a network namespace holding a bridge; nodes and the host attach veths.
switch_up() {
	if alive switch; then return 0; fi
	mkdir -p "$state/switch"
	# Background processes get no stdio of ours: a caller waiting for our output
	# would otherwise wait for them.
	unshare -n --fork -- sleep infinity </dev/null >/dev/null 2>&1 &
	local p=$! i
	for i in $(seq 50); do [[ $(readlink /proc/$p/ns/net) != "$(readlink /proc/self/ns/net)" ]] && break; sleep 0.1; done
	echo "$p" >"$state/switch/pid"
	nsenter -t "$p" -n -- ip link set lo up
	nsenter -t "$p" -n -- ip link add br0 type bridge
	nsenter -t "$p" -n -- ip link set br0 up
	ip link add "$host_if" type veth peer name sw-host
	ip link set sw-host netns "$p"
	nsenter -t "$p" -n -- ip link set sw-host master br0 up
	ip addr add "$host_ip/24" dev "$host_if"
	ip link set "$host_if" up
	log "switch up: host $host_ip on $host_if"
}

switch_down() {
	local p net q i pids=()
	p=$(pid_of switch)
	# The holder is `unshare --fork`, which ignores SIGTERM while it waits for its
	# child (util-linux), so a plain kill left both running after every teardown:
	# kill every process in the switch's network namespace (never the host's, should
	# the pid file be stale), as node_down does for a node.
	if [[ -n $p && -d /proc/$p ]]; then
		net=$(readlink "/proc/$p/ns/net" 2>/dev/null || true)
		if [[ -n $net && $net != "$(readlink /proc/self/ns/net)" ]]; then
			for q in /proc/[0-9]*; do
				[[ $(readlink "$q/ns/net" 2>/dev/null) == "$net" ]] && pids+=("${q#/proc/}")
			done
			[[ ${#pids[@]} -eq 0 ]] || kill -9 "${pids[@]}" 2>/dev/null || true
			for i in $(seq 50); do [[ -d /proc/$p ]] || break; sleep 0.1; done
			[[ -d /proc/$p ]] && log "warning: the switch holder $p is still running"
		fi
	fi
	ip link del "$host_if" 2>/dev/null || true
	rm -rf "$state/switch"
}

# sysctls the kubelet writes at start; the node gets private copies so that the
# host's kernel settings stay as they are.
kubelet_sysctls=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

node_up() {
	local n=$1 ip=$2 podcidr=$3 version=$4 s=$state/$1
	alive "$n" && die "node $n is already up"
	alive switch || die "switch is down (node.sh switch-up)"
	local bins=$cache/k8s/$version
	[[ -x $bins/kubeadm ]] || die "no kubeadm $version in $bins (hack/realnode/build.sh)"
	rm -rf "$s"
	mkdir -p "$s"/{upper,work}/{etc,usr,var} "$s"/data/{containerd,kubelet,log-pods,log-containers} "$s/sysctl" "$s/log"
	for f in "${kubelet_sysctls[@]}"; do cp "/proc/sys/$f" "$s/sysctl/${f//\//.}"; done

	# The holder sets up the node's mounts inside its own namespaces, then sleeps;
	# every node process joins its namespaces with nsenter.
	unshare -m -n -u --propagation private --fork -- bash -euc '
		s=$1 n=$2; shift 2
		for d in etc usr var; do
			mount -t overlay "rn-$n-$d" -o "lowerdir=/$d,upperdir=$s/upper/$d,workdir=$s/work/$d" "/$d"
		done
		mount -t tmpfs -o mode=755 "rn-$n-run" /run
		# The overlayfs snapshotter and kubelet volumes cannot live on an overlay.
		mkdir -p /var/lib/containerd /var/lib/kubelet /var/log/pods /var/log/containers
		mount --bind "$s/data/containerd" /var/lib/containerd
		mount --bind "$s/data/kubelet" /var/lib/kubelet
		mount --bind "$s/data/log-pods" /var/log/pods
		mount --bind "$s/data/log-containers" /var/log/containers
		for f in "$@"; do mount --bind "$s/sysctl/${f//\//.}" "/proc/sys/$f"; done
		hostname "$n"
		ip link set lo up
		touch "$s/ready"
		exec sleep infinity
	' holder "$s" "$n" "${kubelet_sysctls[@]}" </dev/null >>"$s/log/holder.log" 2>&1 &
	echo $! >"$s/pid"
	local i
	for i in $(seq 100); do [[ -f $s/ready ]] && break; sleep 0.1; done
	[[ -f $s/ready ]] || die "node $n: holder did not come up"

	# Network: eth0 on the switch, a default route that leads nowhere (kubeadm and the
	# kubelet pick the node IP from it), forwarding for the pod bridge, resolver 127.0.0.1.
	local sw; sw=$(pid_of switch)
	ip link add "rn-$n" type veth peer name "sw-$n"
	ip link set "rn-$n" netns "$(pid_of "$n")"
	ip link set "sw-$n" netns "$sw"
	nsenter -t "$sw" -n -- ip link set "sw-$n" master br0 up
	in_node "$n" ip link set "rn-$n" name eth0
	in_node "$n" ip addr add "$ip/24" dev eth0
	in_node "$n" ip link set eth0 up
	in_node "$n" ip route add default via "$subnet_prefix.254" dev eth0 onlink
	in_node "$n" sysctl -qw net.ipv4.ip_forward=1
	in_node "$n" sh -c "echo nameserver 127.0.0.1 >/etc/resolv.conf; printf '127.0.0.1 localhost\n$ip $n\n' >/etc/hosts"

	# Binaries at kubeadm's default paths, the systemctl stand-in, the CNI config.
	in_node "$n" install -m 0755 "$bins/kubeadm" /usr/bin/kubeadm
	in_node "$n" install -m 0755 "$bins/kubelet" /usr/bin/kubelet
	in_node "$n" install -m 0755 "$here/systemctl" /usr/bin/systemctl
	in_node "$n" install -m 0755 "$here/kubelet-service.sh" /usr/local/lib/realnode-kubelet-service
	in_node "$n" mkdir -p /etc/cni/net.d /etc/containerd /etc/kubernetes/manifests /etc/capi-inplace
	in_node "$n" sh -c "cat >/etc/cni/net.d/10-lane.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "lane", "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
 "ipMasq": false, "hairpinMode": true,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "$podcidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
	in_node "$n" sh -c "cat >/etc/containerd/config.toml" <<EOF
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:$(pause_tag "$version")"
  # The sandbox lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below ours.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.k8s.io"]
    endpoint = ["$registry_mirror"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
EOF
	# The kubelet's cgroupRoot (--cgroup-root=/realnode-<node>) must exist in every
	# hierarchy; a v1 cpuset starts empty and takes its parent's CPUs and memory nodes.
	local h
	for h in /sys/fs/cgroup/*/; do
		mkdir -p "$h/realnode-$n"
		if [[ -f $h/cpuset.cpus ]]; then
			cat "$h/cpuset.cpus" >"$h/realnode-$n/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h/realnode-$n/cpuset.mems"
		fi
	done
	# containerd and the kubelet service run in the node's namespaces; setsid keeps
	# them out of the caller's job control.
	in_node "$n" setsid containerd --config /etc/containerd/config.toml >"$s/log/containerd.log" 2>&1 </dev/null &
	for i in $(seq 100); do in_node "$n" test -S /run/containerd/containerd.sock && break; sleep 0.1; done
	in_node "$n" test -S /run/containerd/containerd.sock || die "node $n: containerd did not start (see $s/log/containerd.log)"
	# Only the images kubeadm <version> runs (build.sh names each tarball
	# <image>-<tag>.tar); another release's come from the registry mirror.
	local ref t
	while read -r ref; do
		t=${ref##*/}; t=$cache/images/${t%%:*}-${ref##*:}.tar
		[[ -f $t ]] || continue # CoreDNS and kube-proxy: not built, disabled
		in_node "$n" ctr -n k8s.io images import "$t" >/dev/null
	done < <("$cache/k8s/$version/kubeadm" config images list --kubernetes-version "$version" 2>/dev/null)
	REALNODE_LOG=$s/log/kubelet.log in_node "$n" setsid /usr/local/lib/realnode-kubelet-service >>"$s/log/kubelet-service.log" 2>&1 </dev/null &
	log "node $n up at $ip (pods $podcidr), kubeadm/kubelet $version, state $s"
}

# Preflight checks that fail on every lane node for reasons of the machine, not of the
# cluster: cgroup v1 (SystemVerification).
preflight_ignore=SystemVerification
bootstrap_token=realnd.0123456789abcdef

# kubelet_args <node> <ip>: per-node kubelet flags (kubeadm keeps them in
# kubeadm-flags.env across upgrades): each node's pods under a cgroup of its own.
kubelet_args() {
	printf '  - name: node-ip\n    value: "%s"\n  - name: cgroup-root\n    value: /realnode-%s\n' "$2" "$1"
}

node_init() { # node_init <node> <ip> <version>: kubeadm init, control-plane node
	local n=$1 ip=$2 version=$3
	in_node "$n" sh -c "cat >/etc/kubernetes/lane-init.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: "$bootstrap_token"
  ttl: 24h0m0s
localAPIEndpoint:
  advertiseAddress: $ip
  bindPort: 6443
nodeRegistration:
  name: $n
  criSocket: unix:///run/containerd/containerd.sock
  ignorePreflightErrors: [$preflight_ignore]
  kubeletExtraArgs:
$(kubelet_args "$n" "$ip")
skipPhases: [addon/coredns, addon/kube-proxy]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
clusterName: realnode
controlPlaneEndpoint: $ip:6443
networking:
  podSubnet: 10.244.0.0/16
  serviceSubnet: 10.96.0.0/12
apiServer:
  certSANs: [$ip, $host_ip]
# No CoreDNS or kube-proxy image can be built here.
dns:
  disabled: true
proxy:
  disabled: true
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
# This machine has cgroup v1 only.
failCgroupV1: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
resolvConf: /etc/resolv.conf
# The lane's nodes share the build machine's disk, whose fullness is not theirs: at the
# default 85% the kubelet's image GC deleted a worker's preloaded images, the sandbox
# image too (containerd 1.6 does not pin it), and kubeadm's upgrade health-check Job
# could not start there (seen 2026-12-01 on a machine with 15% of its disk available).
# A node with a disk of its own keeps them; so do the lane's: no image GC, evictions
# only when the disk is really full.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
EOF
	in_node "$n" kubeadm init --config /etc/kubernetes/lane-init.yaml
}

node_join() { # node_join <node> <ip> <control-plane ip>: kubeadm join, worker node
	local n=$1 ip=$2 cp=$3
	in_node "$n" sh -c "cat >/etc/kubernetes/lane-join.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: $cp:6443
    token: "$bootstrap_token"
    unsafeSkipCAVerification: true
nodeRegistration:
  name: $n
  criSocket: unix:///run/containerd/containerd.sock
  ignorePreflightErrors: [$preflight_ignore]
  kubeletExtraArgs:
$(kubelet_args "$n" "$ip")
EOF
	in_node "$n" kubeadm join --config /etc/kubernetes/lane-join.yaml
}

pause_tag() { # the pause tag kubeadm <version> asks for
	"$cache/k8s/$1/kubeadm" config images list --kubernetes-version "$1" 2>/dev/null | sed -n 's|.*/pause:||p'
}

# cgroup directories of the node: the kubelet's cgroupRoot is /realnode-<node>.
node_cgroups() { ls -d /sys/fs/cgroup/*/"realnode-$1" 2>/dev/null || true; }

node_down() {
	local n=$1 s=$state/$1 p mnt net
	p=$(pid_of "$n")
	if [[ -n $p && -d /proc/$p ]]; then
		mnt=$(readlink "/proc/$p/ns/mnt"); net=$(readlink "/proc/$p/ns/net")
		local round
		for round in 1 2 3; do
			# Everything in the node's namespaces (containerd, shims, kubelet, host-network
			# pods) and in its cgroups (every container).
			local pids=() q cg
			for q in /proc/[0-9]*; do
				[[ $(readlink "$q/ns/mnt" 2>/dev/null) == "$mnt" || $(readlink "$q/ns/net" 2>/dev/null) == "$net" ]] && pids+=("${q#/proc/}")
			done
			while read -r cg; do
				[[ -n $cg ]] || continue
				while read -r q; do pids+=("$q"); done < <(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
			done < <(node_cgroups "$n")
			[[ ${#pids[@]} -gt 0 ]] || break
			kill -9 "${pids[@]}" 2>/dev/null || true
			sleep 0.5
		done
	fi
	local cg
	while read -r cg; do
		[[ -n $cg ]] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done < <(node_cgroups "$n")
	[[ -z $(node_cgroups "$n") ]] || log "warning: cgroups of $n left: $(node_cgroups "$n" | tr '\n' ' ')"
	# Logs are kept for the artifacts; the rest of the state goes.
	if [[ -d $s ]]; then
		mkdir -p "$state/logs/$n"
		cp -a "$s/log/." "$state/logs/$n/" 2>/dev/null || true
		cp -a "$s/data/log-pods" "$state/logs/$n/pods" 2>/dev/null || true
		rm -rf "$s"
	fi
}

cmd=${1:-}
shift || true
case $cmd in
switch-up) switch_up ;;
switch-down) switch_down ;;
up) [[ $# -eq 4 ]] || die "usage: node.sh up <node> <ip> <pod-cidr> <version>"; node_up "$@" ;;
exec) n=$1; shift; alive "$n" || die "node $n is down"; in_node "$n" "$@" ;;
route) alive "$1" || die "node $1 is down"; in_node "$1" ip route replace "$2" via "$3" ;;
init) [[ $# -eq 3 ]] || die "usage: node.sh init <node> <ip> <version>"; node_init "$@" ;;
join) [[ $# -eq 3 ]] || die "usage: node.sh join <node> <ip> <control-plane ip>"; node_join "$@" ;;
down) node_down "$1" ;;
down-all)
	for d in "$state"/*/pid; do
		[[ -e $d ]] || continue
		n=$(basename "$(dirname "$d")")
		[[ $n == switch ]] && continue
		log "down $n (left by an earlier step)"
		node_down "$n"
	done
	switch_down ;;
pid) pid_of "$1" ;;
*) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
