//go:build e2e

package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestDemo runs `capi-inplace-dev demo` in-process, its output not a terminal (changed rows
// as log lines), and checks the summary: the same three Machines (one control plane
// through the single-node path, two workers) with the same UIDs as recorded before the
// update, no Machine created, every node at the new kubelet, the new file on every
// host, and a successful command.
//
// Only one local stack runs per machine (port 19000): the demo waits for the port here
// (--port-wait) instead of failing fast as it does for a user.
//
// go test -tags e2e ./test/cmd/capi-inplace-dev -run TestDemo -v (needs make build tools-capi).
func TestDemo(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	root := filepath.Join("..", "..", "..")
	artifacts := filepath.Join(root, "_artifacts", "demo-e2e-"+time.Now().UTC().Format("20060102-150405"))

	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(io.MultiWriter(&out, testWriter{t}))
	cmd.SetErr(testWriter{t})
	cmd.SetArgs([]string{"demo", "--bin-dir", filepath.Join(root, "bin"), "--artifacts", artifacts,
		"--timeout", "15m", "--port-wait", "40m"})
	err := cmd.ExecuteContext(ctx)
	text := out.String()
	g.Expect(err).NotTo(HaveOccurred(), "demo failed; logs in %s", artifacts)

	// Machines as recorded before the update (phase 4) ...
	before := map[string]string{}
	roles := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^    machine (\S+)\s+(control-plane|worker)\s+uid (\S+) node \S+$`).FindAllStringSubmatch(text, -1) {
		before[m[1]] = m[3]
		roles[m[1]] = m[2]
	}
	g.Expect(before).To(HaveLen(3), "machines recorded before the update")
	cp := 0
	for _, r := range roles {
		if r == "control-plane" {
			cp++
		}
	}
	g.Expect(cp).To(Equal(1), "one control-plane machine")

	// ... and the summary's check per machine: kept, same UID on both sides.
	kept := regexp.MustCompile(`(?m)^  ✓ machine (\S+) \((control-plane|worker)\) kept: uid (\S+) -> (\S+)$`).FindAllStringSubmatch(text, -1)
	g.Expect(kept).To(HaveLen(3), text)
	for _, k := range kept {
		g.Expect(before).To(HaveKeyWithValue(k[1], k[3]), "summary names a machine recorded before, with its UID")
		g.Expect(k[4]).To(Equal(k[3]), "machine %s UID changed", k[1])
		g.Expect(roles[k[1]]).To(Equal(k[2]))
	}
	g.Expect(text).To(ContainSubstring("  ✓ no Machine created or deleted during the rollout (watched: 0 created [], 0 deleted [])"))
	g.Expect(text).To(MatchRegexp(`(?m)^  ✓ every node at kubelet v1\.36\.0: \S+=v1\.36\.0, \S+=v1\.36\.0, \S+=v1\.36\.0$`))
	g.Expect(text).To(MatchRegexp(`(?m)^  ✓ /etc/capi-inplace-demo/motd = ".*" on every node \(3\)$`))
	g.Expect(text).To(MatchRegexp(`(?m)^  ✓ rollout v1\.35\.0 -> v1\.36\.0 with a file change finished in \S+$`))
	g.Expect(text).NotTo(ContainSubstring("✗"))
	g.Expect(text).To(MatchRegexp(`(?m)^  total time \S+ \(rollout \S+\)$`))
	g.Expect(text).To(ContainSubstring("\nRESULT: PASS\n"))
	// The live view printed per-machine progress rows with a bar.
	g.Expect(text).To(MatchRegexp(`\[[#-]+\] \d+/\d+`))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
