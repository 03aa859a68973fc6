#!/usr/bin/env bash
# build.sh builds the binaries that tests and the demo run against into ./bin,
# each only when missing. No prebuilt binary can be downloaded in our build
# environments, so everything comes from the Go module proxy.
#
# usage: hack/tools/build.sh [k8s] [capi]    (default: k8s)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

k8s_version=v1.36.3

log() { printf '==> %s\n' "$*" >&2; }

build() { # build <module dir> <output name> <package> [ldflags]
	local dir=$1 out=$2 pkg=$3 ldflags=${4:-}
	if [[ -x "$bin/$out" ]]; then
		return 0
	fi
	log "building $out from $pkg (first time only; cached in bin/)"
	local start=$SECONDS
	(cd "$root/hack/tools/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
	log "built $out in $((SECONDS - start))s"
}

k8s_ldflags() {
	local v=$k8s_version major minor
	major=${v#v}; major=${major%%.*}
	minor=${v#v*.}; minor=${minor%%.*}
	local f=""
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		f+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$f"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(k8s)

for t in "${targets[@]}"; do
	case "$t" in
	k8s)
		build k8s etcd go.etcd.io/etcd/server/v3
		build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags)"
		build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$(k8s_ldflags)"
		;;
	capi)
		if [[ -x "$root/hack/tools/capi.sh" ]]; then
			"$root/hack/tools/capi.sh"
		else
			log "no CAPI tools defined yet"
		fi
		;;
	*)
		echo "unknown tool set: $t" >&2
		exit 2
		;;
	esac
done
