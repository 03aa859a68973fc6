package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The policy reference: docs/policy-reference.md rendered from the policy's Go
// types, as docs/flags.md is from the commands. The keys, their nesting and
// their types come from the types (reflect, walking the json tags as the strict
// loader reads them); the meaning of each key is its field's doc comment (read
// from the package sources with go/parser, so the text lives once, in the code);
// the defaults are the code's own constants and the built-in policy's values.

const policyReferencePath = "docs/policy-reference.md"

// TestPolicyReference: docs/policy-reference.md is the policy reference rendered
// from the policy's types; it fails when the page is stale (a key added, removed
// or renamed, a type, default or doc comment changed) and says how to regenerate.
func TestPolicyReference(t *testing.T) {
	checkGenerated(t, policyReferencePath, renderPolicyReference(t), "TestPolicyReference")
}

// policyDefaults are the defaults of the keys whose default is not the zero
// value of their type, from the code that applies them: the constants and the
// built-in policy (policy.Builtin, which is New of an empty file). A key listed
// here that the types do not have fails the test.
func policyDefaults() map[string]string {
	builtin := policy.Builtin()
	seconds := func(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) }
	lo, hi := protocol.HTTPGetGate{}.StatusRange()
	return map[string]string{
		"drain.timeoutSeconds":                      strconv.Itoa(int(builtin.Drain().TimeoutSeconds)),
		"drain.skipOnSingleNode":                    strconv.FormatBool(builtin.Drain().SkipOnSingleNode),
		"deadlines.stagingSeconds":                  seconds(policy.DefaultStagingDeadline),
		"deadlines.pickupSeconds":                   seconds(policy.DefaultPickupDeadline),
		"deadlines.applyingSeconds":                 seconds(policy.DefaultApplyingDeadline),
		"deadlines.rebootingSeconds":                seconds(policy.DefaultRebootingDeadline),
		"deadlines.verifyingSeconds":                seconds(policy.DefaultVerifyingDeadline),
		"fleet[].failureBudget":                     strconv.Itoa(int(fleet.DefaultBudget)),
		"fleet[].expectedDurationSeconds":           seconds(fleet.DefaultExpectedDuration),
		"kubeadm.etcdRestore":                       string(protocol.EtcdRestoreIfDataChanged),
		"gates[].gates[].httpGet.expectedStatusMin": strconv.Itoa(lo),
		"gates[].gates[].httpGet.expectedStatusMax": strconv.Itoa(hi),
	}
}

// mapKeyNames name the keys of the policy's maps in the reference's paths: a
// map's keys are data, written <what they are>.
var mapKeyNames = map[string]string{
	"backends.clusters":            "<namespace>/<cluster>",
	"kubernetesBinaries":           "<version>",
	"kubernetesBinaries.<version>": "<platform>",
}

// opaqueTypes are the values the reference names without walking into them:
// another schema's type, with what the reader should read instead.
var opaqueTypes = map[reflect.Type]string{
	reflect.TypeFor[metav1.LabelSelector](): "label selector",
	reflect.TypeFor[json.RawMessage]():      "object",
}

// policyKey is one row of the reference.
type policyKey struct {
	path, typ, def, meaning string
}

// goSource is what the reference reads from the Go sources of the packages that
// define the policy's types: the doc comment of each type and field, and the
// string constants of each named string type (the values it takes).
type goSource struct {
	typeDocs  map[string]string   // "<import path>.<Type>"
	fieldDocs map[string]string   // "<import path>.<Type>.<Field>"
	values    map[string][]string // "<import path>.<Type>" -> its constants' values
}

// modulePath is this module's import path, from the policy package's.
func modulePath() string {
	return strings.TrimSuffix(reflect.TypeFor[policy.Config]().PkgPath(), "/internal/policy")
}

// readGoSource parses the non-test files of the packages (import paths inside
// this module) with their comments.
func readGoSource(t *testing.T, pkgs ...string) goSource {
	t.Helper()
	src := goSource{typeDocs: map[string]string{}, fieldDocs: map[string]string{}, values: map[string][]string{}}
	fset := token.NewFileSet()
	for _, pkg := range pkgs {
		dir := filepath.Join(repoRoot, strings.TrimPrefix(pkg, modulePath()+"/"))
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(names) == 0 {
			t.Fatalf("no Go files for %s in %s: %v", pkg, dir, err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			src.read(pkg, f)
		}
	}
	return src
}

func (src goSource) read(pkg string, f *ast.File) {
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				doc := s.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				key := pkg + "." + s.Name.Name
				src.typeDocs[key] = doc.Text()
				st, ok := s.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, field := range st.Fields.List {
					text := field.Doc.Text()
					if text == "" {
						text = field.Comment.Text()
					}
					for _, n := range field.Names {
						src.fieldDocs[key+"."+n.Name] = text
					}
				}
			case *ast.ValueSpec:
				typ, ok := s.Type.(*ast.Ident)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, v := range s.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if val, err := strconv.Unquote(lit.Value); err == nil {
							src.values[pkg+"."+typ.Name] = append(src.values[pkg+"."+typ.Name], val)
						}
					}
				}
			}
		}
	}
}

// policyKeys walks the policy's types from policy.Config: one row per key, in
// the types' order, and the fields that have no doc comment.
func policyKeys(src goSource) (keys []policyKey, undocumented []string) {
	defaults := policyDefaults()
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if f.Anonymous && name == "" {
				walk(f.Type, path) // inline: its keys are the parent's
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := strings.TrimPrefix(path+"."+name, ".")
			doc := src.fieldDocs[t.PkgPath()+"."+t.Name()+"."+f.Name]
			if doc == "" {
				undocumented = append(undocumented, t.Name()+"."+f.Name)
			}
			def, ok := defaults[p]
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ok:
			case !slices.Contains(strings.Split(opts, ","), "omitempty"):
				def = "required" // the types leave out only what may be absent
			case f.Type.Kind() == reflect.Bool:
				def = "false" // not a pointer: absent is false
			}
			keys = append(keys, policyKey{path: p, typ: yamlType(src, ft), def: def, meaning: fieldMeaning(f.Name, name, doc)})
			walkValue(ft, p, walk)
		}
	}
	walk(reflect.TypeFor[policy.Config](), "")
	return keys, undocumented
}

// walkValue descends into the keys below a value of type t at path: an
// object's, a list's elements', a map's values'.
func walkValue(t reflect.Type, path string, walk func(reflect.Type, string)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if _, opaque := opaqueTypes[t]; opaque || !strings.HasPrefix(t.PkgPath()+"/", modulePath()+"/") && t.PkgPath() != "" {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		walk(t, path)
	case reflect.Slice:
		walkValue(t.Elem(), path+"[]", walk)
	case reflect.Map:
		key := mapKeyNames[path]
		if key == "" {
			key = "<key>"
		}
		walkValue(t.Elem(), path+"."+key, walk)
	}
}

// yamlType is a Go type as the policy file writes it.
func yamlType(src goSource, t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if name, ok := opaqueTypes[t]; ok {
		return name
	}
	switch t.Kind() {
	case reflect.String:
		if vals := src.values[t.PkgPath()+"."+t.Name()]; len(vals) > 0 {
			return "string: `" + strings.Join(vals, "`, `") + "`"
		}
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Slice, reflect.Array:
		elem := yamlType(src, t.Elem())
		if strings.Contains(elem, ":") {
			return "list"
		}
		return "list of " + plural(elem)
	case reflect.Map:
		return "map of " + plural(yamlType(src, t.Elem()))
	case reflect.Struct:
		return "object"
	case reflect.Interface:
		return "any"
	}
	return t.Kind().String()
}

func plural(s string) string {
	if strings.HasPrefix(s, "list") || strings.HasPrefix(s, "map") {
		return s
	}
	return s + "s"
}

// fieldMeaning is a field's doc comment as the reference's meaning column: one
// line, with the field's Go name at its start written as its key.
func fieldMeaning(goName, key, doc string) string {
	text := strings.Join(strings.Fields(doc), " ")
	for _, sep := range []string{" ", ", "} {
		if rest, ok := strings.CutPrefix(text, goName+sep); ok {
			text = "`" + key + "`" + sep + rest
		}
	}
	return markdownText(text)
}

// markdownText escapes what Markdown would read as markup in a doc comment's
// prose, outside its code spans: < (an HTML tag) and | (a table cell). A
// doc's path (docs/gates.md) becomes a link.
func markdownText(s string) string {
	parts := strings.Split(s, "`")
	for i := range parts {
		if i%2 == 0 {
			parts[i] = strings.ReplaceAll(parts[i], "<", `\<`)
			parts[i] = docPath.ReplaceAllString(parts[i], "[$1]($1)")
		}
		parts[i] = strings.ReplaceAll(parts[i], "|", `\|`)
	}
	return strings.Join(parts, "`")
}

// docPath is a doc named by its path in the repository.
var docPath = regexp.MustCompile(`\bdocs/([a-z0-9-]+\.md)\b`)

// commentMarkdown renders a type's doc comment as Markdown paragraphs: its
// indented blocks (the policy examples) as fenced YAML blocks.
func commentMarkdown(doc string) string {
	var b strings.Builder
	var para, code []string
	flush := func() {
		if len(para) > 0 {
			b.WriteString(markdownText(strings.Join(para, "\n")) + "\n\n")
			para = nil
		}
		if len(code) > 0 {
			for len(code) > 0 && strings.TrimSpace(code[len(code)-1]) == "" {
				code = code[:len(code)-1]
			}
			b.WriteString("```yaml\n" + strings.Join(code, "\n") + "\n```\n\n")
			code = nil
		}
	}
	for _, line := range strings.Split(strings.TrimRight(doc, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "\t"):
			if len(para) > 0 {
				flush()
			}
			code = append(code, strings.TrimPrefix(line, "\t"))
		case strings.TrimSpace(line) == "":
			if len(code) > 0 {
				code = append(code, "")
				continue
			}
			flush()
		default:
			if len(code) > 0 {
				flush()
			}
			para = append(para, line)
		}
	}
	flush()
	return b.String()
}

// renderPolicyReference is the page: a section per top-level key with its
// type's doc comment (the examples) and a table of every key below it.
func renderPolicyReference(t *testing.T) string {
	t.Helper()
	// The packages whose types the policy's keys have (policy, protocol, ...).
	seen, pkgs := map[reflect.Type]bool{}, map[string]bool{}
	var collect func(reflect.Type)
	collect = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if _, opaque := opaqueTypes[t]; opaque || seen[t] || !strings.HasPrefix(t.PkgPath(), modulePath()+"/") {
			return
		}
		seen[t], pkgs[t.PkgPath()] = true, true
		if t.Kind() == reflect.Struct {
			for i := range t.NumField() {
				collect(t.Field(i).Type)
			}
		}
	}
	root := reflect.TypeFor[policy.Config]()
	collect(root)
	importPaths := slices.Sorted(maps.Keys(pkgs))
	src := readGoSource(t, importPaths...)

	keys, undocumented := policyKeys(src)
	for _, f := range undocumented {
		t.Errorf("%s has no doc comment: the policy reference shows it as the key's meaning", f)
	}
	paths := map[string]bool{}
	for _, k := range keys {
		paths[k.path] = true
	}
	for p := range policyDefaults() {
		if !paths[p] {
			t.Errorf("policyDefaults names %s, which the policy does not have", p)
		}
	}

	var b strings.Builder
	b.WriteString(`# Policy reference

Every key of the policy file (` + "`policy.yaml`" + ` of the ConfigMap ` + "`capi-inplace-policy`" + `,
the extension's ` + "`--policy-file`" + `; check one with ` + "`capi-inplace policy validate -f`" + `), generated from
the policy's Go types (` + "`internal/policy`" + `) and their doc comments by
` + "`go test ./cmd/capi-inplace -run TestPolicyReference -update`" + `; the test fails when
this page is stale. Edit the doc comments in the code, not here. A key is
optional unless its default says required (within the entry or section that
holds it); unknown keys are refused. A path's
` + "`[]`" + ` is a list's element, ` + "`<...>`" + ` a map's key. How the settings work together:
[extension.md](extension.md), [gates.md](gates.md), [fleet-controls.md](fleet-controls.md),
[delivery.md](delivery.md), [operations.md](operations.md).
`)
	b.WriteString("\n| section | meaning |\n|---|---|\n")
	var sections []policyKey
	for _, k := range keys {
		if !strings.ContainsAny(k.path, ".[") {
			sections = append(sections, k)
			fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", k.path, strings.ToLower(k.path), firstSentence(k.meaning))
		}
	}
	for i := range root.NumField() {
		f := root.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		k := sections[slices.IndexFunc(sections, func(k policyKey) bool { return k.path == name })]
		fmt.Fprintf(&b, "\n## %s\n\n", k.path)
		st := f.Type
		for st.Kind() == reflect.Pointer || st.Kind() == reflect.Slice {
			st = st.Elem()
		}
		// The section type's doc (its rules and examples), unless it only says
		// in one sentence what the key's meaning says.
		doc := src.typeDocs[st.PkgPath()+"."+st.Name()]
		if st.PkgPath() != "" && (strings.Contains(doc, "\n\t") || strings.Count(doc, ". ")+strings.Count(doc, ".\n") > 1) {
			b.WriteString(commentMarkdown(doc))
		}
		b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
		for _, row := range keys {
			if row.path != k.path && !strings.HasPrefix(row.path, k.path+".") && !strings.HasPrefix(row.path, k.path+"[]") {
				continue
			}
			def := row.def
			if def != "" && def != "required" {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", row.path, markdownText(row.typ), def, row.meaning)
		}
	}
	return b.String()
}

// firstSentence is a meaning's first sentence, for the table of sections.
func firstSentence(s string) string {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == ' ' && strings.Count(s[:i], "`")%2 == 0 && !strings.HasSuffix(s[:i], "e.g") {
			return s[:i+1]
		}
	}
	return s
}
