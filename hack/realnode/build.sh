#!/usr/bin/env bash
# build.sh builds what the real-node lane installs, each piece only when missing,
# cached by version under _cache/realnode (git-ignored):
#   k8s/<version>/   kubeadm, kubelet, kube-apiserver, kube-controller-manager,
#                    kube-scheduler of the two releases (hack/tools/k8s-v1.35 and
#                    hack/tools/k8s pin them)
#   images/          the control-plane, etcd and pause images with the names and
#                    tags kubeadm asks for, and the project's image, as
#                    docker-archive tarballs for `ctr images import`
# Everything comes from the Go module proxy; no Docker engine, no registry.
#
# usage: hack/realnode/build.sh            prints the cache directory when done
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../tools/lib.sh
source "$root/hack/tools/lib.sh"
# shellcheck source=versions.sh
source "$root/hack/realnode/versions.sh"

cache=${REALNODE_CACHE:-$root/_cache/realnode}
tools=$cache/tools
mkdir -p "$cache/images" "$tools"
start=$SECONDS

# The k8s tool set also gives etcd (the same 3.6 build serves every etcd tag below).
"$root/hack/tools/build.sh" k8s

k8s_release() { # k8s_release <version> <module dir>
	local v=$1 mod=$2 out=$cache/k8s/$1 missing=()
	for c in kubeadm kubelet kube-apiserver kube-controller-manager kube-scheduler; do
		[[ -x $out/$c ]] && continue
		if [[ $c == kube-apiserver && $v == "$(sed -n 's/^k8s_version=//p' "$root/hack/tools/build.sh")" && -x $root/bin/kube-apiserver ]]; then
			# The envtest kube-apiserver is this very build (same module, flags).
			mkdir -p "$out" && cp "$root/bin/kube-apiserver" "$out/$c"
			continue
		fi
		missing+=("k8s.io/kubernetes/cmd/$c")
	done
	[[ ${#missing[@]} -gt 0 ]] || return 0
	# One go build for all of them: the packages they share compile once.
	log "building Kubernetes $v: ${missing[*]##*/} (first time only; cached in $out)"
	local t0=$SECONDS tmp=$out.tmp
	rm -rf "$tmp" && mkdir -p "$tmp" "$out"
	(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $(k8s_ldflags "$v")" -o "$tmp/" "${missing[@]}")
	mv "$tmp"/* "$out/" && rmdir "$tmp"
	log "built Kubernetes $v in $((SECONDS - t0))s"
}
from_minor=${FROM_VERSION%.*}
k8s_release "$FROM_VERSION" "$root/hack/tools/k8s-$from_minor"
k8s_release "$TO_VERSION" "$root/hack/tools/k8s"
k8s_release_dir() { echo "$cache/k8s/$1"; }

go_build "$root/hack/tools/image" "$tools/image" .
go_build "$root/hack/tools/image" "$tools/pause" ./pause

# image <tarball name> <tag> <entrypoint> <file=dest>...: one image, skipped when
# present; an empty entrypoint leaves it to the pod (kubeadm's static pods name
# their command).
image() {
	local tarball=$cache/images/$1 tag=$2 entrypoint=$3
	shift 3
	[[ -f $tarball ]] && return 0
	local files=()
	for f in "$@"; do files+=(-file "$f"); done
	"$tools/image" -out "$tarball" -tag "$tag" -entrypoint "$entrypoint" "${files[@]}" >/dev/null
	log "image $tag"
}

for v in "$FROM_VERSION" "$TO_VERSION"; do
	dir=$(k8s_release_dir "$v")
	# kubeadm says which images it will run; CoreDNS and kube-proxy are disabled in the
	# lane (no images of them can be built here), so they are skipped.
	while read -r ref; do
		name=${ref##*/}; name=${name%%:*}
		case $name in
		kube-apiserver | kube-controller-manager | kube-scheduler)
			image "$name-$v.tar" "$ref" "" "$dir/$name=/usr/local/bin/$name" ;;
		etcd)
			image "etcd-${ref##*:}.tar" "$ref" "" "$root/bin/etcd=/usr/local/bin/etcd" ;;
		pause)
			image "pause-${ref##*:}.tar" "$ref" /pause "$tools/pause=/pause" ;;
		coredns | kube-proxy) ;;
		*) echo "realnode: kubeadm $v lists an image this lane cannot build: $ref" >&2; exit 1 ;;
		esac
	done < <("$dir/kubeadm" config images list --kubernetes-version "$v" 2>/dev/null)
done

log "real-node artifacts ready in $((SECONDS - start))s"
echo "$cache"
