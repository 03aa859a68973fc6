package fleet

import (
	"encoding/json"
	"slices"
	"testing"
)

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestOwnerOf(t *testing.T) {
	for _, tc := range []struct{ md, cp, kind, name, want string }{
		{md: "md-0", want: "MachineDeployment/md-0"},
		{md: "md-0", cp: "cp", kind: "KubeadmControlPlane", name: "cp", want: "MachineDeployment/md-0"},
		{cp: "cp", kind: "KubeadmControlPlane", name: "cp", want: "KubeadmControlPlane/cp"},
		{cp: "cp", want: ""}, // no controlPlaneRef on the Cluster
		{kind: "KubeadmControlPlane", name: "cp", want: ""},
	} {
		if got := OwnerOf(tc.md, tc.cp, tc.kind, tc.name); got != tc.want {
			t.Errorf("OwnerOf(%q, %q, %q, %q) = %q, want %q", tc.md, tc.cp, tc.kind, tc.name, got, tc.want)
		}
		if tc.want == "" {
			continue
		}
		kind, name := SplitOwner(tc.want)
		if kind+"/"+name != tc.want {
			t.Errorf("SplitOwner(%q) = %q, %q", tc.want, kind, name)
		}
	}
}

// TestOwnerSpecKeyAndCounted is the whole rule: a failure recorded with its
// owner's spec key counts while the owner has that key; scaling or a rollout
// setting is not a new spec, a new template or version is.
func TestOwnerSpecKeyAndCounted(t *testing.T) {
	key := func(kind, spec string) string {
		t.Helper()
		k, err := OwnerSpecKey(kind, decode(t, spec))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	md := `{"replicas": 3, "template": {"spec": {"version": "v1.35.0"}}}`
	mdScaled := `{"replicas": 5, "rollout": {"strategy": {"type": "InPlace"}}, "template": {"spec": {"version": "v1.35.0"}}}`
	mdNew := `{"replicas": 3, "template": {"spec": {"version": "v1.36.0"}}}`
	kcp := `{"replicas": 3, "version": "v1.35.0", "rollout": {"after": "2026-12-01T00:00:00Z"}, "remediation": {"maxRetry": 2}, "machineNaming": {"template": "x"}}`
	kcpScaled := `{"replicas": 5, "version": "v1.35.0"}`
	kcpNew := `{"replicas": 3, "version": "v1.36.0"}`

	if key(KindMachineDeployment, md) != key(KindMachineDeployment, mdScaled) {
		t.Error("scaling a MachineDeployment changed its spec key")
	}
	if key(KindMachineDeployment, md) == key(KindMachineDeployment, mdNew) {
		t.Error("a new template kept the MachineDeployment's spec key")
	}
	if key("KubeadmControlPlane", kcp) != key("KubeadmControlPlane", kcpScaled) {
		t.Error("scaling or a rollout setting changed the control plane's spec key")
	}
	if key("KubeadmControlPlane", kcp) == key("KubeadmControlPlane", kcpNew) {
		t.Error("a new version kept the control plane's spec key")
	}
	// The key records already hold: the first 8 bytes of the JSON's sha256, in hex
	// (a new key would reset every recorded failure's budget on upgrade).
	if got, want := key(KindMachineDeployment, md), "98b2dc530064df16"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}

	mdOwner, cpOwner := "MachineDeployment/md-0", "KubeadmControlPlane/cp"
	failures := []Failure{
		{Machine: "w1", Node: "w1", Pool: "workers", Owner: mdOwner, Spec: key(KindMachineDeployment, md)},
		{Machine: "w2", Node: "w2", Pool: "workers", Owner: mdOwner, Spec: key(KindMachineDeployment, md)},
		{Machine: "bare", Node: "bare", Pool: "workers"}, // no owner: counts until resume
		{Machine: "cp1", Node: "cp1", Pool: "", Owner: cpOwner, Spec: key("KubeadmControlPlane", kcp)},
	}
	if got := Owners(failures); !slices.Equal(got, []string{mdOwner, cpOwner}) {
		t.Errorf("Owners = %v", got)
	}
	nodes := func(fs []Failure) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Node)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		specs  map[string]string // current spec keys; absent: the owner is gone
		pool   string
		counts []string
	}{
		{name: "unchanged", specs: map[string]string{mdOwner: key(KindMachineDeployment, mdScaled)}, pool: "workers", counts: []string{"w1", "w2", "bare"}},
		{name: "spec changed since the failures", specs: map[string]string{mdOwner: key(KindMachineDeployment, mdNew)}, pool: "workers", counts: []string{"bare"}},
		{name: "owner deleted", specs: map[string]string{}, pool: "workers", counts: []string{"bare"}},
		{name: "control plane scaled", specs: map[string]string{cpOwner: key("KubeadmControlPlane", kcpScaled)}, pool: "", counts: []string{"cp1"}},
		{name: "control plane upgraded", specs: map[string]string{cpOwner: key("KubeadmControlPlane", kcpNew)}, pool: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Counted(failures, tc.pool, func(o string) (string, bool) { s, ok := tc.specs[o]; return s, ok })
			if !slices.Equal(nodes(got), tc.counts) {
				t.Errorf("counted %v, want %v", nodes(got), tc.counts)
			}
		})
	}
}
