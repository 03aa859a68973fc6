#!/usr/bin/env bash
# build.sh builds the binaries that tests and the demo run against into ./bin,
# each only when missing. No prebuilt binary can be downloaded in our build
# environments, so everything comes from the Go module proxy.
#
# usage: hack/tools/build.sh [k8s] [capi] [clusterctl] [lint] [controller-gen]    (default: k8s)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

k8s_version=v1.36.3
# clusterctl's release: the sigs.k8s.io/cluster-api version of go.mod and hack/tools/clusterctl/go.mod.
capi_version=v1.14.2

# shellcheck source=lib.sh
source "$root/hack/tools/lib.sh"

build() { # build <module dir> <output name> <package> [ldflags]
	go_build "$root/hack/tools/$1" "$bin/$2" "$3" "${4:-}"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(k8s)

for t in "${targets[@]}"; do
	case "$t" in
	k8s)
		build k8s etcd go.etcd.io/etcd/server/v3
		build k8s etcdutl go.etcd.io/etcd/etcdutl/v3
		build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags "$k8s_version")"
		build k8s kubectl k8s.io/kubernetes/cmd/kubectl "$(k8s_ldflags "$k8s_version")"
		;;
	clusterctl)
		# Stamped with its release like upstream's build (clusterctl version, and the
		# version checker, which the tests turn off: no network).
		build clusterctl clusterctl sigs.k8s.io/cluster-api/cmd/clusterctl "$(capi_ldflags "$capi_version")"
		;;
	lint)
		build golangci golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
		;;
	controller-gen)
		build controllergen controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
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
