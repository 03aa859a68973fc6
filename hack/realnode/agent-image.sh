#!/usr/bin/env bash
# agent-image.sh writes the agent's image for the real-node lanes (the agent and its
# etcd and CEL helpers from bin/, as in the release image) as a docker-archive
# tarball, tagged by the binaries' content, and prints the tag.
#
# usage: hack/realnode/agent-image.sh <tarball>
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
bin=$root/bin
tool=${REALNODE_CACHE:-$root/_cache/realnode}/tools/image
tag=capi-inplace.local/capi-inplace-agent:lane-$(cat "$bin/capi-inplace-agent" "$bin/capi-inplace-etcd" "$bin/capi-inplace-cel" | sha256sum | cut -c1-12)
mkdir -p "$(dirname "$out")"
"$tool" -out "$out" -tag "$tag" \
	-file "$bin/capi-inplace-agent=/capi-inplace-agent" -file "$bin/capi-inplace-etcd=/capi-inplace-etcd" \
	-file "$bin/capi-inplace-cel=/capi-inplace-cel" \
	-entrypoint /capi-inplace-agent >/dev/null
echo "$tag"
