package nodeplan

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
)

// buildFiles builds a worker plan with the given files and Secrets.
func buildFiles(files []bootstrapv1.File, secrets map[string]map[string][]byte) error {
	_, err := Build(Input{
		Machine:             machine("v1.36.0", false),
		NodeName:            "node-1",
		KubeadmConfig:       &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: files}},
		Secrets:             secrets,
		ControlPlaneVersion: "v1.36.0",
		Node:                NodeFacts{KubeletVersion: "v1.35.2"},
	})
	return err
}

func tplFile(content string) bootstrapv1.File {
	return bootstrapv1.File{Path: "/etc/tpl", Content: content, ContentFormat: bootstrapv1.FileContentFormatTemplate}
}

// chain is a template whose call tree doubles at every level: 2^depth calls
// without writing a byte.
func chain(depth int) string {
	var b strings.Builder
	b.WriteString(`{{define "t0"}}x{{end}}`)
	for i := 1; i <= depth; i++ {
		b.WriteString(`{{define "t` + itoa(i) + `"}}{{template "t` + itoa(i-1) + `"}}{{template "t` + itoa(i-1) + `"}}{{end}}`)
	}
	b.WriteString(`{{template "t` + itoa(depth) + `"}}`)
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestRenderingIsBounded: hostile templates fail with ErrTooLarge (and ErrInput, so
// the hook answers Failure) within a bounded time and allocation; real templates
// still render.
func TestRenderingIsBounded(t *testing.T) {
	const allocBound = 64 << 20 // the old code allocated 300 MB and more for these
	mib := strings.Repeat("x", 600<<10)
	tests := []struct {
		name    string
		files   []bootstrapv1.File
		secrets map[string]map[string][]byte
		wantErr string // empty: builds
	}{
		{name: "the review's probe: 300 x 1 MB", files: []bootstrapv1.File{tplFile(`{{range 300}}{{printf "%999999s" ""}}{{end}}`)},
			wantErr: "range"},
		{name: "endless range over an integer", files: []bootstrapv1.File{tplFile(`{{range 1000000000000}}{{end}}`)}, wantErr: "range"},
		{name: "range over a variable", files: []bootstrapv1.File{tplFile(`{{$n := 100000000}}{{range $n}}{{end}}`)}, wantErr: "range"},
		{name: "output over 1 MiB", files: []bootstrapv1.File{tplFile(`{{printf "%999999s" ""}}{{printf "%999999s" ""}}`)},
			wantErr: "rendered output exceeds 1048576 bytes"},
		{name: "values that never reach the output", files: []bootstrapv1.File{tplFile(
			`{{$a := printf "%999999s" ""}}{{$b := printf "%s%s%s%s%s%s%s%s" $a $a $a $a $a $a $a $a}}{{$c := printf "%s%s%s%s%s%s%s%s" $b $b $b $b $b $b $b $b}}`)},
			wantErr: "template functions would produce more than"},
		{name: "many variables", files: []bootstrapv1.File{tplFile(strings.Repeat(`{{$a := printf "%999999s" ""}}`, 200))},
			wantErr: "template functions would produce more than"},
		{name: "escaper amplification", files: []bootstrapv1.File{tplFile(`{{$a := printf "%999999s" "<"}}{{html $a $a $a $a}}`)},
			wantErr: "template functions would produce more than"},
		{name: "recursion", files: []bootstrapv1.File{tplFile(`{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`)}, wantErr: "calls itself"},
		{name: "exponential call tree", files: []bootstrapv1.File{tplFile(chain(40))}, wantErr: "expands to more than"},
		{name: "secret content over 1 MiB", files: []bootstrapv1.File{{Path: "/etc/big",
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "s", Key: "k"}}}},
			secrets: map[string]map[string][]byte{"s": {"k": make([]byte, 2<<20)}}, wantErr: "content is 2097152 bytes"},
		{name: "whole plan over the Secret's room", files: []bootstrapv1.File{
			{Path: "/etc/a", Content: mib}, {Path: "/etc/b", Content: mib}}, wantErr: "a plan Secret can carry"},

		{name: "control plane version", files: []bootstrapv1.File{tplFile(`cp={{ .controlPlane.version }}`)}},
		{name: "conditionals and printf", files: []bootstrapv1.File{tplFile(`{{ if .controlPlane }}{{ printf "%s-%05d" .controlPlane.version 7 }}{{ end }}`)}},
		{name: "range over the data", files: []bootstrapv1.File{tplFile(`{{ range $k, $v := .controlPlane }}{{ $k }}={{ $v }}{{ end }}{{ range $.controlPlane }}{{ . }}{{ end }}`)}},
		{name: "escapers and a small call tree", files: []bootstrapv1.File{tplFile(`{{ html "<a>" }}{{ js "'" }}{{ urlquery "a b" }}{{ print 1 2 }}{{ println "x" }}` + chain(8))}},
		{name: "a 500 KiB file", files: []bootstrapv1.File{{Path: "/etc/a", Content: strings.Repeat("x", 500<<10)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			done := make(chan error, 1)
			go func() { done <- buildFiles(tt.files, tt.secrets) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Build did not return within 10s")
			}
			runtime.ReadMemStats(&after)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(errors.Is(err, ErrInput)).To(BeTrue(), "ErrInput makes the hook answer Failure")
			g.Expect(errors.Is(err, ErrTooLarge)).To(BeTrue())
			g.Expect(after.TotalAlloc-before.TotalAlloc).To(BeNumerically("<", uint64(allocBound)), "bytes allocated while refusing")
		})
	}
}
