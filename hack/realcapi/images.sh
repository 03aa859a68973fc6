#!/usr/bin/env bash
# images.sh builds the images of the real Cluster API lane into the lane's Docker
# engine (dockerd.sh), each only when an image with the same content is missing:
#   capi-real/node:<FROM_VERSION>  a kind-style node (systemd, containerd, runc, CNI
#       plugins, crictl, kubeadm and kubelet of the lane's first release, that
#       release's control-plane images preloaded); the second release's binaries and
#       images reach the nodes as an upgrade's do (test/e2ereal serves them)
#   capi-real/haproxy:lane         the load balancer Cluster API's Docker provider runs
#   $REALCAPI_CACHE/httpserve.tar  the scenarios' workload (hack/tools/image/httpserve)
# Root filesystems come from Debian's packages (mmdebstrap); Kubernetes from
# hack/realnode/build.sh's cache. Prints the node image's reference.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../tools/lib.sh
source "$root/hack/tools/lib.sh"
# shellcheck source=../realnode/versions.sh
source "$root/hack/realnode/versions.sh"
cache=${REALCAPI_CACHE:-$root/_cache/realcapi}
realnode_cache=${REALNODE_CACHE:-$root/_cache/realnode}
docker=/usr/bin/docker
die() { printf "realcapi: %s\n" "$*" >&2; exit 1; }
export DOCKER_HOST=unix:///run/capi-real/docker.sock
mkdir -p "$cache"
start=$SECONDS

"$here/dockerd.sh" up
go_build "$root/hack/tools/crictl" "$cache/crictl" sigs.k8s.io/cri-tools/cmd/crictl

# has_image <ref> <content hash>: the engine holds ref built from that content.
has_image() {
	[[ $($docker image inspect -f '{{index .Config.Labels "dev.capi-inplace.content"}}' "$1" 2>/dev/null) == "$2" ]]
}

# rootfs <name> <packages...>: a minbase Debian bookworm root filesystem as a docker
# image capi-real/<name>-base, tagged by its package list.
rootfs() {
	local name=$1; shift
	local pkgs; pkgs=$(IFS=,; echo "$*")
	local tag; tag=capi-real/$name-base:$(echo "$pkgs" | sha256sum | cut -c1-12)
	if ! $docker image inspect "$tag" >/dev/null 2>&1; then
		local t0=$SECONDS tar=$cache/$name-rootfs.tar
		log "building the $name root filesystem from Debian packages (first time only)"
		mmdebstrap --quiet --variant=minbase --include="$pkgs" \
			--dpkgopt='path-exclude=/usr/share/{doc,man,locale}/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
			bookworm "$tar" >&2
		$docker import "$tar" "$tag" >/dev/null
		rm -f "$tar"
		log "$name root filesystem in $((SECONDS - t0))s"
	fi
	echo "$tag"
}

# The node.
# One root filesystem serves both images (one mmdebstrap run: CI time); the node
# never starts haproxy.
node_base=$(rootfs node systemd systemd-sysv dbus containerd runc iptables conntrack socat ethtool ebtables \
	containernetworking-plugins iproute2 ca-certificates procps kmod util-linux mount haproxy)
bins=$realnode_cache/k8s/$FROM_VERSION
[[ -x $bins/kubeadm ]] || die "no kubeadm $FROM_VERSION in $bins (hack/realnode/build.sh)"
ctx=$cache/node-context
rm -rf "$ctx" && mkdir -p "$ctx/bin" "$ctx/images"
cp -a "$here/node/." "$ctx/rootfs"
cp "$bins/kubeadm" "$bins/kubelet" "$cache/crictl" "$ctx/bin/"
pause=""
while read -r ref; do
	t=${ref##*/}; t=$realnode_cache/images/${t%%:*}-${ref##*:}.tar
	[[ -f $t ]] || continue # CoreDNS and kube-proxy: none can be built here
	cp "$t" "$ctx/images/"
	[[ $ref == */pause:* ]] && pause=$ref
done < <("$bins/kubeadm" config images list --kubernetes-version "$FROM_VERSION" 2>/dev/null)
mkdir -p "$ctx/rootfs/etc/containerd"
cat >"$ctx/rootfs/etc/containerd/config.toml" <<TOML
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # In sandboxes without CAP_SYS_RESOURCE runc cannot lower an OOM score; harmless elsewhere.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  # The lane's registry (test/e2ereal) on the kind network's gateway: a mirror of
  # registry.k8s.io (the upgrade's control-plane images) and the agent's registry.
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.k8s.io"]
    endpoint = ["http://172.18.0.1:5123"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."capi-inplace.local"]
    endpoint = ["http://172.18.0.1:5123"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $node_base
COPY rootfs/ /
COPY bin/ /usr/bin/
COPY images/ /kind/images/
RUN systemctl enable containerd kubelet capi-real-images \
 && systemctl mask getty.target console-getty.service systemd-logind.service systemd-udevd.service \
      systemd-udev-trigger.service systemd-modules-load.service sys-kernel-config.mount sys-kernel-debug.mount haproxy.service \
 && echo -n >/etc/machine-id && echo "$FROM_VERSION" >/kind/version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKERFILE
node_hash=$( (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
node_ref=capi-real/node:$FROM_VERSION
if ! has_image "$node_ref" "$node_hash"; then
	t0=$SECONDS
	DOCKER_BUILDKIT=0 $docker build -q --label "dev.capi-inplace.content=$node_hash" -t "$node_ref" "$ctx" >/dev/null
	log "node image $node_ref in $((SECONDS - t0))s"
fi
rm -rf "$ctx"

# The load balancer: Debian's haproxy with the provider's entrypoint and config path.
ctx=$cache/haproxy-context
rm -rf "$ctx" && mkdir -p "$ctx"
cat >"$ctx/haproxy.cfg" <<'CFG'
# Replaced by Cluster API's Docker provider before first use.
global
  log stdout format raw local0
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend placeholder
  bind 127.0.0.1:65000
CFG
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $node_base
COPY haproxy.cfg /usr/local/etc/haproxy/haproxy.cfg
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
DOCKERFILE
lb_hash=$( (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
if ! has_image capi-real/haproxy:lane "$lb_hash"; then
	DOCKER_BUILDKIT=0 $docker build -q --label "dev.capi-inplace.content=$lb_hash" -t capi-real/haproxy:lane "$ctx" >/dev/null
	log "load balancer image capi-real/haproxy:lane"
fi
rm -rf "$ctx"
# The workload the lane's scenarios serve and probe (pushed to the lane's registry by
# the test, pulled by the nodes as any workload image is).
go_build "$root/hack/tools/image" "$cache/image" .
go_build "$root/hack/tools/image" "$cache/httpserve" ./httpserve
if [[ ! -f $cache/httpserve.tar || $cache/httpserve -nt $cache/httpserve.tar ]]; then
	"$cache/image" -out "$cache/httpserve.tar" -tag capi-inplace.local/e2e-httpserve:v1 \
		-file "$cache/httpserve=/httpserve" -entrypoint /httpserve >/dev/null
fi
log "real-CAPI lane images ready in $((SECONDS - start))s"
echo "$node_ref"
