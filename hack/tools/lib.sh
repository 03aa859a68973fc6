# lib.sh: helpers shared by the tool build scripts (source it).

log() { printf '==> %s\n' "$*" >&2; }

# k8s_ldflags <version>: the version stamps Kubernetes' own build sets.
k8s_ldflags() {
	local v=$1 major minor f=""
	major=${v#v}; major=${major%%.*}
	minor=${v#v*.}; minor=${minor%%.*}
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		f+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$f"
}

# capi_ldflags <version>: the version stamps Cluster API's own build sets (hack/version.sh).
capi_ldflags() {
	local v=$1 major minor p=sigs.k8s.io/cluster-api/version
	major=${v#v}; major=${major%%.*}
	minor=${v#v*.}; minor=${minor%%.*}
	echo "-X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
}

# go_build <module dir> <output path> <package> [ldflags]: a static, stripped build,
# skipped when the output exists; written under a temporary name, then renamed, so
# that an interrupted build leaves nothing that looks complete.
go_build() {
	local dir=$1 out=$2 pkg=$3 ldflags=${4:-}
	if [[ -x "$out" ]]; then
		return 0
	fi
	log "building $(basename "$out") from $pkg (first time only; cached)"
	local start=$SECONDS
	mkdir -p "$(dirname "$out")"
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
	mv "$out.tmp" "$out"
	log "built $(basename "$out") in $((SECONDS - start))s"
}
