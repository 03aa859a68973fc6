package protocol

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKubeadmEtcdTableMatchesKubeadm compares kubeadmEtcdReleases with kubeadm's
// own table (cmd/kubeadm/app/constants SupportedEtcdVersion) in every
// k8s.io/kubernetes the Go module cache holds (the tools build kube-apiserver
// from it): kubeadm of release v1.Y.Z deploys SupportedEtcdVersion[Y] for
// Kubernetes v1.Y.Z, so the table must cover v1.Y.Z with that etcd minor. A
// newer k8s.io/kubernetes in the cache than the table covers fails here with
// the row to add. Skipped when the cache holds none.
func TestKubeadmEtcdTableMatchesKubeadm(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(modCache(), "k8s.io", "kubernetes@v1.*", "cmd", "kubeadm", "app", "constants", "constants.go"))
	if len(files) == 0 {
		t.Skipf("no k8s.io/kubernetes in the module cache %s: kubeadm's etcd table not compared", modCache())
	}
	for _, file := range files {
		dir := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(file)))))), "kubernetes@")
		release, err := ParseVersion(dir)
		if err != nil || release.Pre != nil {
			t.Logf("%s: not a release, skipped", dir)
			continue
		}
		supported, err := supportedEtcdVersion(file, release.Minor)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		tag, found := supported[release.Minor]
		if !found {
			t.Fatalf("%s: SupportedEtcdVersion has no entry for its own minor %d: %v", dir, release.Minor, supported)
		}
		want, err := ParseEtcdMinor(tag)
		if err != nil {
			t.Fatalf("%s: SupportedEtcdVersion[%d]: %v", dir, release.Minor, err)
		}
		got, ok := KubeadmEtcdMinor(dir)
		switch {
		case !ok:
			t.Errorf("kubeadm %s deploys etcd %s (SupportedEtcdVersion[%d]); kubeadmEtcdReleases does not cover %s: add {minor: %d, throughPatch: %d, etcd: EtcdMinor{%d, %d}} or move the row's throughPatch",
				dir, tag, release.Minor, dir, release.Minor, release.Patch, want.Major, want.Minor)
		case got != want:
			t.Errorf("kubeadm %s deploys etcd %s (SupportedEtcdVersion[%d]); kubeadmEtcdReleases says %s", dir, tag, release.Minor, got)
		default:
			t.Logf("kubeadm %s: etcd %s, the table says %s", dir, tag, got)
		}
	}
}

func modCache() string {
	if dir := os.Getenv("GOMODCACHE"); dir != "" {
		return dir
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = build.Default.GOPATH
	}
	return filepath.Join(strings.Split(gopath, string(filepath.ListSeparator))[0], "pkg", "mod")
}

// supportedEtcdVersion reads kubeadm's SupportedEtcdVersion map from its
// constants.go, whose keys are minor versions, written either as numbers or as
// uint8(getSkewedKubernetesVersion(n).Minor()): kubeadm's own minor plus n.
func supportedEtcdVersion(file string, ownMinor uint64) (map[uint64]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return nil, err
	}
	var lit *ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "SupportedEtcdVersion" || len(vs.Values) != 1 {
			return true
		}
		lit, _ = vs.Values[0].(*ast.CompositeLit)
		return false
	})
	if lit == nil {
		return nil, errNotFound("SupportedEtcdVersion")
	}
	out := map[uint64]string{}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return nil, errNotFound("a key: value entry")
		}
		minor, ok := minorKey(kv.Key, ownMinor)
		if !ok {
			return nil, errNotFound("a minor version key")
		}
		v, ok := kv.Value.(*ast.BasicLit)
		if !ok || v.Kind != token.STRING {
			return nil, errNotFound("a string etcd version")
		}
		tag, err := strconv.Unquote(v.Value)
		if err != nil {
			return nil, err
		}
		out[minor] = tag
	}
	return out, nil
}

// minorKey evaluates a key of SupportedEtcdVersion.
func minorKey(key ast.Expr, ownMinor uint64) (uint64, bool) {
	if b, ok := key.(*ast.BasicLit); ok && b.Kind == token.INT {
		n, err := strconv.ParseUint(b.Value, 10, 8)
		return n, err == nil
	}
	skew, found := int64(0), false
	ast.Inspect(key, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "getSkewedKubernetesVersion" || len(call.Args) != 1 {
			return true
		}
		arg, neg := call.Args[0], false
		if u, ok := arg.(*ast.UnaryExpr); ok && u.Op == token.SUB {
			arg, neg = u.X, true
		}
		b, ok := arg.(*ast.BasicLit)
		if !ok || b.Kind != token.INT {
			return false
		}
		v, err := strconv.ParseInt(b.Value, 10, 8)
		if err != nil {
			return false
		}
		if neg {
			v = -v
		}
		skew, found = v, true
		return false
	})
	if !found || int64(ownMinor)+skew < 0 {
		return 0, false
	}
	return uint64(int64(ownMinor) + skew), true
}

type errNotFound string

func (e errNotFound) Error() string { return "kubeadm constants: no " + string(e) }
