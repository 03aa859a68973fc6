package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// SPDX 2.3 JSON, the fields this SBOM uses.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string       `json:"name"`
	SPDXID           string       `json:"SPDXID"`
	VersionInfo      string       `json:"versionInfo,omitempty"`
	DownloadLocation string       `json:"downloadLocation"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
	Checksums        []spdxSum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
	Comment          string       `json:"comment,omitempty"`
}

type spdxSum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExtRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// spdxFromBinary writes the SBOM of a Go binary from its embedded build
// information (what `go version -m` prints): the main module, every module it
// links with its version and go.sum hash, and the Go toolchain. created is the
// source date, so the document is the same for the same commit.
func spdxFromBinary(imageName, bin string, created time.Time) ([]byte, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("build info of %s: %w", bin, err)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: imageName,
		DocumentNamespace: "https://github.com/capi-inplace/capi-inplace/spdx/" + imageName + "/" + hex.EncodeToString(sum[:]),
		CreationInfo:      spdxCreation{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: capi-inplace-hack-tools-images"}},
	}
	var settings []string
	for _, s := range bi.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	mainID := "SPDXRef-Package-main"
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: bi.Path, SPDXID: mainID, VersionInfo: bi.Main.Version, DownloadLocation: "NOASSERTION",
		Checksums:    []spdxSum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(sum[:])}},
		ExternalRefs: []spdxExtRef{purl(bi.Main.Path, bi.Main.Version)},
		Comment:      "main module " + bi.Main.Path + "; build settings: " + strings.Join(settings, " "),
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: mainID})
	doc.Packages = append(doc.Packages, spdxPackage{
		Name: "stdlib", SPDXID: "SPDXRef-Package-stdlib", VersionInfo: bi.GoVersion, DownloadLocation: "https://go.dev/dl/",
		ExternalRefs: []spdxExtRef{purl("stdlib", bi.GoVersion)},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: "SPDXRef-Package-stdlib"})
	deps := bi.Deps
	sort.Slice(deps, func(i, j int) bool { return deps[i].Path < deps[j].Path })
	for i, d := range deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		id := fmt.Sprintf("SPDXRef-Package-%d", i)
		p := spdxPackage{Name: d.Path, SPDXID: id, VersionInfo: m.Version, DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
			ExternalRefs: []spdxExtRef{purl(m.Path, m.Version)}}
		if m.Sum != "" {
			p.Comment = "go.sum " + m.Sum
		}
		if d.Replace != nil {
			p.Comment = strings.TrimSpace(p.Comment + "; replaced by " + m.Path + " " + m.Version)
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: id})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// purl is a Go module's package URL (pkg:golang/<path>@<version>).
func purl(path, version string) spdxExtRef {
	loc := "pkg:golang/" + path
	if version != "" {
		loc += "@" + version
	}
	return spdxExtRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: loc}
}
