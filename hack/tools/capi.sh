#!/usr/bin/env bash
# capi.sh builds the upstream Cluster API v1.14.2 managers that the end-to-end stack
# (internal/localstack) runs as processes, into ./bin, each only when missing.
# Pins live in hack/tools/capi/go.mod (all three cluster-api modules at v1.14.2:
# later root versions are not fully served by the module proxy).
# Called by `hack/tools/build.sh capi` (make tools-capi).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

log() { printf '==> %s\n' "$*" >&2; }

build() { # build <output name> <package>
	local out=$1 pkg=$2
	if [[ -x "$bin/$out" ]]; then
		return 0
	fi
	log "building $out from $pkg (first time only; cached in bin/)"
	local start=$SECONDS
	(cd "$root/hack/tools/capi" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/$out.tmp" "$pkg")
	mv "$bin/$out.tmp" "$bin/$out"
	log "built $out in $((SECONDS - start))s"
}

build capi-core-manager sigs.k8s.io/cluster-api/core
build capi-kcp-manager sigs.k8s.io/cluster-api/controlplane/kubeadm
build capi-bootstrap-manager sigs.k8s.io/cluster-api/bootstrap/kubeadm
build capi-dev-manager sigs.k8s.io/cluster-api/test/infrastructure/docker
build capi-test-extension sigs.k8s.io/cluster-api/test/extension

# The stack installs each provider's CRDs and webhook configurations from the same
# module versions as the binaries; copy them next to the binaries so that running the
# stack (tests, demo) needs neither the go command nor a module download.
config="$bin/capi-config"
if [[ ! -f "$config/.complete" ]]; then
	log "copying CRDs and webhook manifests into bin/capi-config"
	dirs=$(cd "$root/hack/tools/capi" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api sigs.k8s.io/cluster-api/test)
	capi=$(sed -n 1p <<<"$dirs")
	capitest=$(sed -n 2p <<<"$dirs")
	rm -rf "$config"
	copy() { # copy <provider> <config dir>
		mkdir -p "$config/$1/crd" "$config/$1/webhook"
		cp "$2"/crd/bases/*.yaml "$config/$1/crd/"
		cp "$2"/webhook/manifests.yaml "$config/$1/webhook/"
	}
	copy core "$capi/core/config"
	copy kcp "$capi/controlplane/kubeadm/config"
	copy bootstrap "$capi/bootstrap/kubeadm/config"
	copy dev "$capitest/infrastructure/docker/config"
	chmod -R u+w "$config"
	touch "$config/.complete"
fi
