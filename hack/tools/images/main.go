// Command images builds capi-inplace's release images without a Docker engine
// (`make image`): for each image it cross-compiles one Go package per platform
// (static, -trimpath), lays it on a base assembled here (CA certificates from the
// pinned golang.org/x/crypto/x509roots/fallback module, /etc/passwd and /etc/group
// with root and the distroless nonroot user 65532, a 1777 /tmp), adds an SPDX SBOM
// derived from the binary's embedded build information (`go version -m`), and writes
// one multi-platform OCI image index per image into an OCI image layout, printing
// each index digest. With -push it also pushes each index to <push>/<name>.
//
// Reproducible: file times, owners and order are fixed, the image creation time is
// the commit's time (SOURCE_DATE_EPOCH or `git log -1 --format=%ct`), and the SBOM
// holds nothing from the build machine, so one commit gives one digest.
//
// usage:
//
//	images -repo . -out _artifacts/images -version v0.1.0 \
//	       -image capi-inplace=./cmd/capi-inplace -image capi-inplace-agent=./cmd/capi-inplace-agent,./cmd/capi-inplace-etcd,./cmd/capi-inplace-cel \
//	       -root-image capi-inplace-agent [-platforms linux/amd64,linux/arm64] [-push localhost:5000/capi-inplace]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var (
		o          Options
		images     multi
		rootImages multi
		platforms  string
	)
	flag.StringVar(&o.RepoRoot, "repo", ".", "Root of the Go module whose packages are built.")
	flag.StringVar(&o.Out, "out", "_artifacts/images", "Output directory: OCI image layout (oci/), SBOMs, digests.")
	flag.StringVar(&o.Version, "version", "dev", "Version stamped into the binaries (-X main.version).")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "Comma-separated os/arch list.")
	flag.StringVar(&o.Push, "push", "", "Registry repository prefix to push each image index to as <push>/<name>:<version> (e.g. localhost:5000/capi-inplace).")
	flag.Var(&images, "image", "name=./package[,./helper...]: an image, the main package it runs and the helper binaries it carries beside it (at /<package's last element>); repeatable.")
	flag.Var(&rootImages, "root-image", "Name of an image whose process runs as root (the node agent); others run as 65532:65532.")
	flag.Parse()
	o.Platforms = strings.Split(platforms, ",")
	for _, im := range images {
		name, pkgs, ok := strings.Cut(im, "=")
		list := strings.Split(pkgs, ",")
		if !ok || name == "" || slices.Contains(list, "") {
			fmt.Fprintf(os.Stderr, "images: -image %q: want name=./package[,./helper...]\n", im)
			os.Exit(2)
		}
		spec := ImageSpec{Name: name, Package: list[0], Helpers: list[1:], User: NonRootUser}
		for _, r := range rootImages {
			if r == name {
				spec.User = RootUser
			}
		}
		o.Images = append(o.Images, spec)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, r := range res {
		fmt.Printf("%s@%s\n", r.Name, r.Digest)
		if r.Pushed != "" {
			fmt.Printf("  pushed %s\n", r.Pushed)
		}
	}
}
