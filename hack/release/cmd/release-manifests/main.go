// Command release-manifests writes capi-inplace's clusterctl release artifacts
// (package release) for one version: `make release-manifests RELEASE_VERSION=v0.1.0`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/capi-inplace/capi-inplace/hack/release"
)

func main() {
	configDir := flag.String("config", "config", "the repository's config/ directory")
	version := flag.String("version", "", "the release, a semantic version with a leading v (v0.1.0)")
	registry := flag.String("registry", release.DefaultRegistry, "the registry and organisation of the images capi-inplace and capi-inplace-agent")
	out := flag.String("out", "_artifacts/release", "where to write <provider label>/<version>/")
	flag.Parse()

	a, err := release.Build(release.Options{ConfigDir: *configDir, Version: *version, Registry: *registry})
	if err != nil {
		fmt.Fprintf(os.Stderr, "release-manifests: %v\n", err)
		os.Exit(1)
	}
	path, err := release.Write(*out, a)
	if err != nil {
		fmt.Fprintf(os.Stderr, "release-manifests: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
