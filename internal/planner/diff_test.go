package planner

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	. "github.com/onsi/gomega"
	gomodulesjsonpatch "gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestLeafDiffs(t *testing.T) {
	tests := []struct {
		name     string
		cur, des string
		want     []string
	}{
		{name: "equal", cur: `{"a":{"b":1}}`, des: `{"a":{"b":1}}`, want: nil},
		{name: "scalar", cur: `{"a":{"b":1}}`, des: `{"a":{"b":2}}`, want: []string{"a.b"}},
		{name: "lists are leaves", cur: `{"l":[{"x":1},{"x":2}]}`, des: `{"l":[{"x":1}]}`, want: []string{"l"}},
		{name: "added subtree is walked to its leaves", cur: `{}`, des: `{"a":{"b":{"c":1,"d":[1]}}}`, want: []string{"a.b.c", "a.b.d"}},
		{name: "removed subtree is walked to its leaves", cur: `{"a":{"b":1,"c":{"d":2}}}`, des: `{}`, want: []string{"a.b", "a.c.d"}},
		{name: "empty map presence", cur: `{"a":{}}`, des: `{}`, want: []string{"a"}},
		{name: "null versus absent", cur: `{"a":null}`, des: `{}`, want: []string{"a"}},
		{name: "type change", cur: `{"a":{"b":1}}`, des: `{"a":"s"}`, want: []string{"a"}},
		{name: "sorted output", cur: `{"z":1,"a":1,"m":{"y":1,"b":1}}`, des: `{"z":2,"a":2,"m":{"y":2,"b":2}}`, want: []string{"a", "m.b", "m.y", "z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var got []string
			for _, p := range leafDiffs(obj(t, tt.cur), obj(t, tt.des)) {
				got = append(got, p.String())
			}
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestMakePatch(t *testing.T) {
	tests := []struct {
		name     string
		cur, des string
		covered  [][]string
		want     string // current after the patch
	}{
		{
			name: "only covered fields change", cur: `{"spec":{"a":1,"b":1}}`, des: `{"spec":{"a":2,"b":2}}`,
			covered: [][]string{{"spec", "a"}}, want: `{"spec":{"a":2,"b":1}}`,
		},
		{
			name: "parents are created", cur: `{"spec":{}}`, des: `{"spec":{"x":{"y":{"z":"v"}},"other":1}}`,
			covered: [][]string{{"spec", "x", "y", "z"}}, want: `{"spec":{"x":{"y":{"z":"v"}}}}`,
		},
		{
			name: "empty parents are pruned when desired lacks them", cur: `{"spec":{"c":{"fg":{"A":true}},"keep":1}}`, des: `{"spec":{"keep":1}}`,
			covered: [][]string{{"spec", "c", "fg", "A"}}, want: `{"spec":{"keep":1}}`,
		},
		{
			name: "parents desired keeps are not pruned", cur: `{"spec":{"c":{"fg":{"A":true}}}}`, des: `{"spec":{"c":{"fg":{}}}}`,
			covered: [][]string{{"spec", "c", "fg", "A"}}, want: `{"spec":{"c":{"fg":{}}}}`,
		},
		{
			name: "non-empty parents stay", cur: `{"spec":{"c":{"fg":{"A":true},"x":1}}}`, des: `{"spec":{"c":{"x":2}}}`,
			covered: [][]string{{"spec", "c", "fg", "A"}}, want: `{"spec":{"c":{"x":1}}}`,
		},
		{
			name: "the compared root is never removed", cur: `{"spec":{"a":1}}`, des: `{}`,
			covered: [][]string{{"spec", "a"}}, want: `{"spec":{}}`,
		},
		{
			name: "list edits", cur: `{"spec":{"l":[{"p":"/a"},{"p":"/b"},{"p":"/c"}]}}`, des: `{"spec":{"l":[{"p":"/c"},{"p":"/d"}]}}`,
			covered: [][]string{{"spec", "l"}}, want: `{"spec":{"l":[{"p":"/c"},{"p":"/d"}]}}`,
		},
		{
			name: "keys needing JSON pointer escapes", cur: `{"spec":{"m":{"a/b":1,"c~d":1}}}`, des: `{"spec":{"m":{"a/b":2}}}`,
			covered: [][]string{{"spec", "m", "a/b"}, {"spec", "m", "c~d"}}, want: `{"spec":{"m":{"a/b":2}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var covered []fieldPath
			for _, c := range tt.covered {
				covered = append(covered, c)
			}
			cur := obj(t, tt.cur)
			patch, err := makePatch(cur, obj(t, tt.des), covered, 1)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(patch).NotTo(BeNil())
			decoded, err := jsonpatch.DecodePatch(patch)
			g.Expect(err).NotTo(HaveOccurred())
			raw, _ := json.Marshal(cur)
			out, err := decoded.Apply(raw)
			g.Expect(err).NotTo(HaveOccurred(), string(patch))
			g.Expect(obj(t, string(out))).To(Equal(obj(t, tt.want)), string(patch))
			g.Expect(string(patch)).To(Equal(string(wholeObjectPatch(t, cur, obj(t, tt.des), covered, 1))),
				"the patch of the cut subtrees is the patch of the whole objects")
		})
	}
}

// TestMakePatchIsTheWholeObjectPatch compares makePatch, which diffs only the
// subtrees that can differ, with the diff of the whole objects it replaced, on
// objects with metadata and status beside the compared root.
func TestMakePatchIsTheWholeObjectPatch(t *testing.T) {
	meta := `"apiVersion":"x/v1","kind":"K","metadata":{"name":"n","labels":{"a":"b"}},"status":{"s":[1,2]}`
	tests := []struct {
		name     string
		cur, des string
		covered  [][]string
		stop     int
	}{
		{"scalar", `{` + meta + `,"spec":{"a":1,"b":"x"}}`, `{` + meta + `,"spec":{"a":2,"b":"y"}}`, [][]string{{"spec", "a"}, {"spec", "b"}}, 1},
		{"compared root absent in current", `{` + meta + `}`, `{` + meta + `,"spec":{"a":{"b":1}}}`, [][]string{{"spec", "a", "b"}}, 1},
		{"deep root, parents created", `{` + meta + `,"spec":{"template":{"spec":{}}}}`, `{` + meta + `,"spec":{"template":{"spec":{"x":{"y":[1]}}}}}`,
			[][]string{{"spec", "template", "spec", "x", "y"}}, 3},
		{"deep root absent", `{` + meta + `,"spec":{"replicas":3}}`, `{` + meta + `,"spec":{"template":{"spec":{"v":"1"}}}}`,
			[][]string{{"spec", "template", "spec", "v"}}, 3},
		{"list shrinks and grows", `{` + meta + `,"spec":{"l":[1,2,3],"m":[{"a":1}]}}`, `{` + meta + `,"spec":{"l":[3],"m":[{"a":2},{"b":1}]}}`,
			[][]string{{"spec", "l"}, {"spec", "m"}}, 1},
		{"type change", `{` + meta + `,"spec":{"a":{"b":1}}}`, `{` + meta + `,"spec":{"a":"s"}}`, [][]string{{"spec", "a"}}, 1},
		{"removal prunes parents", `{` + meta + `,"spec":{"c":{"d":{"e":1}},"f":{"g":1,"h":2}}}`, `{` + meta + `,"spec":{"f":{"h":2}}}`,
			[][]string{{"spec", "c", "d", "e"}, {"spec", "f", "g"}}, 1},
		{"nested covered paths", `{` + meta + `,"spec":{"a":{"b":{"c":1}}}}`, `{` + meta + `,"spec":{"a":{"b":{"c":2,"d":3}}}}`,
			[][]string{{"spec", "a", "b", "c"}, {"spec", "a", "b", "d"}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var covered []fieldPath
			for _, c := range tt.covered {
				covered = append(covered, c)
			}
			cur, des := obj(t, tt.cur), obj(t, tt.des)
			before, _ := json.Marshal(cur)
			patch, err := makePatch(cur, des, covered, tt.stop)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(patch)).To(Equal(string(wholeObjectPatch(t, cur, des, covered, tt.stop))))
			after, _ := json.Marshal(cur)
			g.Expect(string(after)).To(Equal(string(before)), "makePatch must not change current")
		})
	}
}

// wholeObjectPatch is makePatch as it was before the cut: copy all of current,
// diff the whole objects.
func wholeObjectPatch(t *testing.T, current, desired map[string]any, covered []fieldPath, stop int) []byte {
	t.Helper()
	target, _ := runtime.DeepCopyJSONValue(current).(map[string]any)
	for _, p := range covered {
		copyField(target, desired, p, stop)
	}
	curJSON, _ := json.Marshal(current)
	targetJSON, _ := json.Marshal(target)
	ops, err := gomodulesjsonpatch.CreatePatch(curJSON, targetJSON)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) == 0 {
		return nil
	}
	slices.SortStableFunc(ops, func(a, b gomodulesjsonpatch.Operation) int {
		return strings.Compare(listRoot(a.Path), listRoot(b.Path))
	})
	out, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMakePatchNothingCovered(t *testing.T) {
	g := NewWithT(t)
	patch, err := makePatch(obj(t, `{"spec":{"a":1}}`), obj(t, `{"spec":{"a":2}}`), nil, 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(patch).To(BeNil())
}

func TestVersionChange(t *testing.T) {
	tests := []struct {
		from, to any
		covered  bool
	}{
		{"v1.35.2", "v1.35.3", true},
		{"v1.35.2", "v1.36.0", true},
		{"v1.35.2", "v1.36.7", true},
		{"v1.36.0-rc.1", "v1.36.0", true},
		{"v1.35.2", "v1.37.0", false},
		{"v1.35.2", "v1.35.1", false},
		{"v1.36.0", "v1.35.9", false},
		{"v1.35.2", "v2.0.0", false},
		{"v1.35.2", "1.36.0", false},
		{"1.35.2", "v1.36.0", false},
		{"v1.35", "v1.36.0", false},
		{"v1.35.2", "", false},
		{nil, "v1.36.0", false},
		{"v1.35.2", 136, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v to %v", tt.from, tt.to), func(t *testing.T) {
			g := NewWithT(t)
			covered, reason := versionChange(tt.from, tt.to)
			g.Expect(covered).To(Equal(tt.covered), reason)
			g.Expect(reason).NotTo(BeEmpty())
		})
	}
}

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad JSON %s: %v", s, err)
	}
	return m
}
