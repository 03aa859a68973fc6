package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// textFuncs are the functions with which code decides on the content of a string.
var textFuncs = map[string]bool{
	"strings.Contains": true, "strings.ContainsAny": true, "strings.HasPrefix": true,
	"strings.HasSuffix": true, "strings.Index": true, "strings.EqualFold": true,
	"strings.Cut": true, "strings.CutPrefix": true, "strings.CutSuffix": true,
}

// allowed are the places that read text written by a component outside this repository
// that offers nothing typed to decide on. Each needs its reason; a stale entry fails.
var allowed = map[string]string{
	"internal/agent/listwatch.go":       "the API server's InternalError for a field selector it does not support has no typed reason",
	"internal/agent/simhost/kubelet.go": "Cluster API's in-memory API server reports a missing object as an InternalError whose text is the only sign",
	"internal/agent/artifact/oci.go":    "go-containerregistry's verifying reader reports a digest mismatch as an untyped error",
}

// TestNoBehaviourDependsOnMessageText fails for any non-test Go file that decides on
// the text of a message or an error: strings.Contains (and kin) whose argument is an
// err.Error(), a GetMessage() or a .Message field. Components talk in types (the
// coordinator's Outcome Kind and Cause, API condition reasons, errors.Is/As); a
// reworded message must never change what the code does. On the code before this test,
// internal/singlenode/outcome.go decided "final failure" this way.
func TestNoBehaviourDependsOnMessageText(t *testing.T) {
	root := repoRoot(t)
	found := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case strings.HasPrefix(d.Name(), ".") && rel != ".", d.Name() == "_cache", d.Name() == "_artifacts", d.Name() == "bin", d.Name() == "testdata", d.Name() == "vendor":
				return filepath.SkipDir
			case rel == "test" || rel == "bench":
				// Test and benchmark harnesses: they drive the extension over the
				// hook's wire, whose response carries progress only in its message,
				// and judge what they see; no product behaviour lives there.
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, hit := range messageTextUses(t, path) {
			found[filepath.ToSlash(rel)] = append(found[filepath.ToSlash(rel)], hit)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for f := range found {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if _, ok := allowed[f]; ok {
			continue
		}
		t.Errorf("%s decides on message text (decide on a type, a reason or errors.Is/As instead): %s", f, strings.Join(found[f], "; "))
	}
	for f := range allowed {
		if _, ok := found[f]; !ok {
			t.Errorf("allowed entry %s no longer reads message text: remove it", f)
		}
	}
}

// TestMessageTextDetector: the detector finds what it must and passes what it must.
func TestMessageTextDetector(t *testing.T) {
	dir := t.TempDir()
	src := `package x
import "strings"
type r struct{ Message string }
func (r) GetMessage() string { return "" }
func a(err error, resp r, msg string, s []string) bool {
	_ = strings.Contains(resp.GetMessage(), "rolled back")     // hit
	_ = strings.HasPrefix(resp.Message, "step 5/6")            // hit
	_ = strings.Contains(err.Error(), "not found")             // hit
	_ = strings.Contains(msg, "tool output")                   // a plain string: not judged
	text := resp.GetMessage()
	_ = strings.Contains(text, "the agent failed plan")        // hit: text carries the message
	_ = strings.Contains(strings.Join(s, ","), "x")            // not a message
	return false
}
`
	p := filepath.Join(dir, "x.go")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := messageTextUses(t, p); len(got) != 4 {
		t.Fatalf("want 4 hits, got %d: %v", len(got), got)
	}
}

func messageTextUses(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	// Names given a message's text (msg := resp.GetMessage()) carry it on, per file.
	carriers := map[string]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, rhs := range as.Rhs {
			if id, ok := as.Lhs[i].(*ast.Ident); ok && isMessageText(rhs, nil) {
				carriers[id.Name] = true
			}
		}
		return true
	})
	var hits []string
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || !textFuncs[funcName(call.Fun)] {
			return true
		}
		for _, arg := range call.Args {
			if isMessageText(arg, carriers) {
				hits = append(hits, fset.Position(call.Pos()).String())
				break
			}
		}
		return true
	})
	return hits
}

func funcName(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return pkg.Name + "." + sel.Sel.Name
}

// isMessageText: x.Error(), x.GetMessage(), x.Message, or a name that was given one.
func isMessageText(e ast.Expr, carriers map[string]bool) bool {
	switch v := e.(type) {
	case *ast.Ident:
		return carriers[v.Name]
	case *ast.CallExpr:
		if sel, ok := v.Fun.(*ast.SelectorExpr); ok && len(v.Args) == 0 {
			return sel.Sel.Name == "Error" || sel.Sel.Name == "GetMessage"
		}
	case *ast.SelectorExpr:
		return v.Sel.Name == "Message"
	}
	return false
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}
