package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent/agentcmd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdhelper"
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
	"github.com/capi-inplace/capi-inplace/internal/cli"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/status"
)

// The docs tests: every command-line flag, annotation or label key of ours and
// policy key that README.md or docs/*.md names exists in the code. The truth is
// the code itself: the binaries' cobra command trees, the string constants of
// api/v1alpha1 and the policy's Go types (their json tags, as the strict loader
// reads them).

const repoRoot = "../.."

// upstreamFlags are other tools' long flags that the docs name outside a
// command line of that tool (in prose, tables, YAML or output), so that no
// program can be read from the context. A flag on a command line of another
// program (`kubeadm upgrade apply --yes`, a shell block's `clusterctl init
// --infrastructure ...`) needs no entry: the line names its program.
var upstreamFlags = map[string]string{
	"skip-phases":             "kubeadm upgrade apply/node",
	"ignore-preflight-errors": "kubeadm",
	"certificate-renewal":     "kubeadm upgrade",
	"download-only":           "apt-get install, rpm-ostree",
	"downloadonly":            "dnf",
	"mark-compacted":          "etcdutl snapshot restore",
	"bump-revision":           "etcdutl snapshot restore",
	"cgroup-driver":           "kubelet",
	"fail-cgroupv1":           "kubelet",
	"max-pods":                "kubelet",
	"describe":                "clusterctl generate provider",
	"raw":                     "clusterctl generate provider, kubectl get",
	"config":                  "clusterctl, kubeadm",
	"target-namespace":        "clusterctl init",
	"previous":                "kubectl logs",
	"type":                    "kubectl patch",
	"secure-port":             "kube-apiserver",
	"override-boot-slot":      "rauc service",
	"retain":                  "ostree admin deploy",
	"cap-drop":                "docker run",
}

// docFiles are the docs the tests read: README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	var docs []string
	for _, pattern := range []string{"*.md", "runbooks/*.md"} {
		found, err := filepath.Glob(filepath.Join(repoRoot, "docs", pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, found...)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(repoRoot, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	return files
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// commandTrees are the binaries' command trees, by the program name a reader
// types: the extension and CLI, the agent, the kubectl plugin, the agent's etcd
// helper (etcdctl's connection flags, as its usage names them) and the harness
// binary capi-inplace-dev (never shipped): the product agent with its --simulate
// flag, and the demo with the flags its source declares (package main of
// test/cmd/capi-inplace-dev, which no test can import).
func commandTrees(t *testing.T) map[string]*cobra.Command {
	t.Helper()
	// The agent's --node-name and --image default to $NODE_NAME and $AGENT_IMAGE:
	// the reference shows them unset.
	t.Setenv("NODE_NAME", "")
	t.Setenv("AGENT_IMAGE", "")
	dev := &cobra.Command{Use: "capi-inplace-dev"}
	dev.AddCommand(agentcmd.NewCommand("agent", "dev", func(string, string, logr.Logger) (*agentcmd.Simulation, error) { return nil, nil }),
		harnessDemoCommand(t))
	return map[string]*cobra.Command{
		"capi-inplace-etcd":  etcdHelperCommand(t),
		"capi-inplace":       newRootCommand(),
		"capi-inplace-agent": agentcmd.NewBinaryCommand("dev"),
		"kubectl-inplace":    cli.NewPluginCommand("dev"),
		"capi-inplace-dev":   dev,
	}
}

// etcdHelperCommand is the agent's etcd helper (a Go flag.FlagSet, not cobra)
// with the flags its usage text, etcdhelper.Usage, names.
func etcdHelperCommand(t *testing.T) *cobra.Command {
	t.Helper()
	c := &cobra.Command{Use: "capi-inplace-etcd"}
	for _, m := range regexp.MustCompile(`--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(etcdhelper.Usage, -1) {
		if c.Flags().Lookup(m[1]) == nil {
			c.Flags().String(m[1], "", "")
		}
	}
	if !c.HasAvailableFlags() {
		t.Fatal("etcdhelper.Usage names no flag")
	}
	return c
}

// harnessDemoCommand is `capi-inplace-dev demo` with the flags that
// test/cmd/capi-inplace-dev/demo.go declares (f.<Type>Var(&..., "name", ...)).
func harnessDemoCommand(t *testing.T) *cobra.Command {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot, "test/cmd/capi-inplace-dev/demo.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	demo := &cobra.Command{Use: "demo"}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") || len(call.Args) < 2 {
			return true
		}
		lit, ok := call.Args[1].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Sel.Name == "BoolVar" {
			demo.Flags().Bool(name, false, "")
		} else {
			demo.Flags().String(name, "", "")
		}
		return true
	})
	if !demo.HasAvailableFlags() {
		t.Fatal("no flags found in test/cmd/capi-inplace-dev/demo.go: has the demo command moved?")
	}
	return demo
}

// lookupFlag finds a long (or, with short, a one-letter) flag of c, its own or
// inherited from a parent's persistent flags.
func lookupFlag(c *cobra.Command, name string, short bool) *pflag.Flag {
	find := func(fs *pflag.FlagSet) *pflag.Flag {
		if short {
			return fs.ShorthandLookup(name)
		}
		return fs.Lookup(name)
	}
	if f := find(c.Flags()); f != nil {
		return f
	}
	for p := c; p != nil; p = p.Parent() {
		if f := find(p.PersistentFlags()); f != nil {
			return f
		}
	}
	return nil
}

// takesValue: the flag consumes the next word unless written --flag=value.
func takesValue(f *pflag.Flag) bool { return f.NoOptDefVal == "" }

func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, fn)
	}
}

// flagChecker judges the flags of the docs' command lines.
type flagChecker struct {
	trees map[string]*cobra.Command
	long  map[string]bool // every long flag of every command of ours
	named map[string][]*cobra.Command
}

func newFlagChecker(trees map[string]*cobra.Command) *flagChecker {
	fc := &flagChecker{trees: trees, long: map[string]bool{"help": true}, named: map[string][]*cobra.Command{}}
	for _, program := range slices.Sorted(maps.Keys(trees)) {
		root := trees[program]
		walkCommands(root, func(c *cobra.Command) {
			add := func(f *pflag.Flag) { fc.long[f.Name] = true }
			c.Flags().VisitAll(add)
			c.PersistentFlags().VisitAll(add)
			if c != root {
				fc.named[c.Name()] = append(fc.named[c.Name()], c)
			}
		})
	}
	// A name on its own means the shallowest command of that name first
	// (`status` before `fleet status`): its problems are the ones reported.
	depth := func(c *cobra.Command) int {
		n := 0
		for p := c.Parent(); p != nil; p = p.Parent() {
			n++
		}
		return n
	}
	for _, cands := range fc.named {
		slices.SortStableFunc(cands, func(a, b *cobra.Command) int { return depth(a) - depth(b) })
	}
	return fc
}

// check returns one problem per flag of line that does not exist.
func (fc *flagChecker) check(line commandLine) []string {
	toks := line.tokens
	if !line.loose {
		for len(toks) > 0 && (isEnvAssignment(toks[0].text) || slices.Contains([]string{"$", "sudo", "env", "exec", "time"}, toks[0].text)) {
			toks = toks[1:]
		}
	}
	if len(toks) == 0 {
		return nil
	}
	if line.loose || strings.HasPrefix(toks[0].text, "-") {
		return fc.checkLoose(toks)
	}
	program := path.Base(toks[0].text)
	args := toks[1:]
	if program == "kubectl" && len(args) > 0 && args[0].text == "inplace" {
		program, args = "kubectl-inplace", args[1:]
	}
	if root, ok := fc.trees[program]; ok {
		return fc.checkCommand(root, args)
	}
	// A subcommand of ours on its own (`agent --host-root=/host`, `status -w`):
	// its flags must be a flag of a command of that name.
	if cands := fc.named[program]; len(cands) > 0 {
		var problems []string
		for _, c := range cands {
			p := fc.checkCommand(c, args)
			if len(p) == 0 {
				return nil
			}
			if problems == nil {
				problems = p
			}
		}
		return problems
	}
	return nil // another program's command line: its flags are its own
}

func isEnvAssignment(s string) bool {
	k, _, ok := strings.Cut(s, "=")
	return ok && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k)
}

// checkCommand walks a command line of ours: subcommands while no positional
// argument was given, then each flag against the command it reached.
func (fc *flagChecker) checkCommand(cmd *cobra.Command, args []word) []string {
	var problems []string
	positional := false
	for i := 0; i < len(args); i++ {
		a := args[i].text
		switch {
		case a == "--":
			return problems
		case strings.HasPrefix(a, "--"):
			flag, _, hasValue := strings.Cut(a[2:], "=")
			if !regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(flag) {
				continue
			}
			f := lookupFlag(cmd, flag, false)
			if f == nil && flag != "help" {
				problems = append(problems, fmt.Sprintf("%d: `%s` has no flag --%s", args[i].line, commandName(cmd), flag))
				continue
			}
			if f != nil && takesValue(f) && !hasValue {
				i++
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			group := a[1:]
			for j := 0; j < len(group); j++ {
				c := string(group[j])
				if !regexp.MustCompile(`^[A-Za-z]$`).MatchString(c) {
					break
				}
				f := lookupFlag(cmd, c, true)
				if f == nil && c != "h" {
					problems = append(problems, fmt.Sprintf("%d: `%s` has no flag -%s", args[i].line, commandName(cmd), c))
					break
				}
				if f != nil && takesValue(f) {
					if j == len(group)-1 && !strings.Contains(group, "=") {
						i++
					}
					break
				}
			}
		default:
			if positional {
				continue
			}
			if sub := findSubcommand(cmd, a); sub != nil {
				cmd = sub
				continue
			}
			// A command that only groups others takes no argument: the word names
			// a subcommand that does not exist (`capi-inplace demo`).
			if !cmd.Runnable() && cmd.HasSubCommands() && regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(a) {
				problems = append(problems, fmt.Sprintf("%d: `%s` has no subcommand %s", args[i].line, commandName(cmd), a))
				return problems
			}
			positional = true
		}
	}
	return problems
}

// commandName is a command as a reader types it.
func commandName(c *cobra.Command) string {
	p := c.CommandPath()
	if rest, ok := strings.CutPrefix(p, "kubectl-inplace"); ok {
		return "kubectl inplace" + rest
	}
	return p
}

func findSubcommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || slices.Contains(sub.Aliases, name) {
			return sub
		}
	}
	return nil
}

// checkLoose: every --flag of text that names no program is a flag of some
// command of ours or an upstream tool's of upstreamFlags.
func (fc *flagChecker) checkLoose(toks []word) []string {
	var problems []string
	for _, tk := range toks {
		for _, m := range looseFlag.FindAllStringSubmatch(tk.text, -1) {
			name := strings.TrimPrefix(m[1], "--")
			name = strings.TrimRight(name, "-")
			if fc.long[name] || upstreamFlags[name] != "" {
				continue
			}
			problems = append(problems, fmt.Sprintf("%d: --%s is a flag of no command of ours (nor in upstreamFlags)", tk.line, name))
		}
	}
	return problems
}

// problems returns one "line: what" per flag of the doc that does not exist.
func (fc *flagChecker) problems(md markdownDoc) []string {
	var out []string
	for _, line := range md.commands {
		out = append(out, fc.check(line)...)
	}
	return out
}

// TestDocsNameOnlyRealFlags: every flag a doc names exists. On a command line of
// ours (a shell block's line, a code span such as `capi-inplace extension
// --policy-file=...` or `kubectl inplace status -A`) the flag, long or short,
// must be one of the command the line reaches; elsewhere (prose, tables, YAML,
// output) a long flag must be one of some command of ours, or an upstream tool's
// from upstreamFlags.
func TestDocsNameOnlyRealFlags(t *testing.T) {
	fc := newFlagChecker(commandTrees(t))
	for _, doc := range docFiles(t) {
		for _, p := range fc.problems(parseMarkdown(readDoc(t, doc))) {
			t.Errorf("%s:%s", doc, p)
		}
	}
}

// annotationRef is a key of ours as the docs write it: not the tail of a longer
// name (guard.inplace.capi-inplace.dev is a webhook, status.inplace... an
// apiVersion). A trailing "-" is kubectl's removal syntax.
var annotationRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9.-])(` + regexp.QuoteMeta(inplacev1.GroupName) + `/[a-z0-9][a-z0-9-]*)`)

// ourKeys are the annotation and label keys (and the apiVersion) of ours: every
// string constant of api/v1alpha1 under GroupName/, and the agent installer's
// own two.
func ourKeys(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(repoRoot, "api/v1alpha1")
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Only the package's own string constants are wanted: its imports (the API
	// types' apimachinery) stay unresolved, and the errors that makes are ignored.
	conf := types.Config{Importer: noImports{}, Error: func(error) {}}
	pkg, _ := conf.Check("v1alpha1", fset, files, nil)
	keys := map[string]bool{
		agentinstall.GuardVersionAnnotation: true, agentinstall.ManifestHashAnnotation: true,
		// The node protocol's apiVersion (internal/protocol), and the API types'.
		inplacev1.GroupName + "/" + inplacev1.Version: true,
	}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || c.Val().Kind() != constant.String {
			continue
		}
		if v := constant.StringVal(c.Val()); strings.HasPrefix(v, inplacev1.GroupName+"/") {
			keys[v] = true
		}
	}
	if !keys[inplacev1.RetryAnnotation] {
		t.Fatalf("the constants of api/v1alpha1 were not read: %v", keys)
	}
	return keys
}

// noImports resolves no import: see ourKeys.
type noImports struct{}

func (noImports) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("%s: not loaded", path)
}

// annotationProblems returns one "line: what" per key of ours in text that
// keys does not hold.
func annotationProblems(keys map[string]bool, text string) []string {
	var out []string
	for i, l := range strings.Split(text, "\n") {
		for _, m := range annotationRef.FindAllStringSubmatch(l, -1) {
			if key := strings.TrimRight(m[1], "-"); !keys[key] {
				out = append(out, fmt.Sprintf("%d: %s is no annotation or label key of ours (api/v1alpha1)", i+1, key))
			}
		}
	}
	return out
}

// TestDocsNameOnlyRealAnnotations: every inplace.capi-inplace.dev/<name> key a
// doc names is one of ours.
func TestDocsNameOnlyRealAnnotations(t *testing.T) {
	keys := ourKeys(t)
	for _, doc := range docFiles(t) {
		for _, p := range annotationProblems(keys, readDoc(t, doc)) {
			t.Errorf("%s:%s", doc, p)
		}
	}
}

// keySchema is the shape of a policy value as its loader reads it: the keys of
// an object, the element of a list, or anything (a map's keys are data; an
// `any` is free-form).
type keySchema struct {
	fields map[string]*keySchema
	elem   *keySchema
	free   bool
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	// rawSchemas: json.RawMessage fields whose content another parser reads
	// strictly, by the field's Go path.
	rawSchemas = map[string]reflect.Type{
		"OSBackendsPoolConfig.Config": reflect.TypeFor[registry.Config](),
	}
)

// schemaOf walks a Go type's json tags as encoding/json reads them (the policy
// loader is sigs.k8s.io/yaml's strict JSON decoding).
func schemaOf(t reflect.Type) *keySchema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() || t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return &keySchema{free: true}
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &keySchema{fields: map[string]*keySchema{}}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if f.Anonymous && name == "" {
				for k, v := range schemaOf(f.Type).fields {
					s.fields[k] = v
				}
				continue
			}
			if name == "" {
				name = f.Name
			}
			if raw, ok := rawSchemas[t.Name()+"."+f.Name]; ok {
				s.fields[name] = schemaOf(raw)
				continue
			}
			s.fields[name] = schemaOf(f.Type)
		}
		return s
	case reflect.Slice, reflect.Array:
		return &keySchema{elem: schemaOf(t.Elem())}
	case reflect.Map, reflect.Interface:
		return &keySchema{free: true}
	default:
		return &keySchema{} // a scalar: no keys below it
	}
}

// unknownKeys reports the keys of a YAML node that s does not have, each with
// its path and line.
func (s *keySchema) unknownKeys(n *kyaml.Node, at string, report func(line int, path string)) {
	if s == nil || s.free || n == nil {
		return
	}
	switch n.Kind {
	case kyaml.DocumentNode:
		for _, c := range n.Content {
			s.unknownKeys(c, at, report)
		}
	case kyaml.SequenceNode:
		for _, c := range n.Content {
			s.elem.unknownKeys(c, at+"[]", report)
		}
	case kyaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := strings.TrimPrefix(at+"."+k.Value, ".")
			sub, ok := s.fields[k.Value]
			if !ok {
				report(k.Line, p)
				continue
			}
			sub.unknownKeys(n.Content[i+1], p, report)
		}
	}
}

// resolve follows a dotted path (list indices dropped) and reports whether the
// policy has it.
func (s *keySchema) resolve(segments []string) bool {
	for _, seg := range segments {
		for s.elem != nil {
			s = s.elem
		}
		if s.free {
			return true
		}
		sub, ok := s.fields[seg]
		if !ok {
			return false
		}
		s = sub
	}
	return true
}

// policyPath is a code span naming a policy setting by its path, e.g.
// `drain.timeoutSeconds`, `kubeadm.etcdRestore: IfDataChanged` or
// `gates[2].gates[1].cel.expression`.
var policyPath = regexp.MustCompile(`^([a-z][A-Za-z0-9]*(?:\[[0-9]*\])?(?:\.[a-z][A-Za-z0-9]*(?:\[[0-9]*\])?)+)(?::.*)?$`)

// fileSuffixes end a code span that is a file name, not a path (`fleet.go`).
var fileSuffixes = map[string]bool{"go": true, "md": true, "yaml": true, "yml": true, "json": true, "sh": true, "txt": true, "toml": true}

// policyKeyProblems returns one "line: what" per policy key of the doc that
// schema does not have, and how many policy examples the doc holds.
func policyKeyProblems(schema *keySchema, md markdownDoc) (out []string, examples int) {
	for _, b := range md.blocks {
		if b.lang != "yaml" && b.lang != "yml" {
			continue
		}
		dec := kyaml.NewDecoder(strings.NewReader(strings.Join(b.lines, "\n")))
		for {
			var n kyaml.Node
			if err := dec.Decode(&n); err != nil {
				break // the end, or not YAML: no policy example
			}
			if !isPolicyExample(&n, schema) {
				continue
			}
			examples++
			schema.unknownKeys(&n, "", func(line int, p string) {
				out = append(out, fmt.Sprintf("%d: the policy has no key %s", b.first+line-1, p))
			})
		}
	}
	names := schema.names(map[string]bool{})
	// The paragraphs that name a key of the policy's own (no Kubernetes label
	// selector's, no OS backend configuration's) by its camelCase name: a
	// camelCase name beside it is taken for a policy key too.
	own := schema.names(map[string]bool{})
	for _, other := range []reflect.Type{reflect.TypeFor[metav1.LabelSelector](), reflect.TypeFor[registry.Config]()} {
		for n := range schemaOf(other).names(map[string]bool{}) {
			delete(own, n)
		}
	}
	outputs := outputKeyNames()
	keyUnits := map[string]bool{}
	for _, line := range md.commands {
		if len(line.tokens) > 0 && line.aboutPolicy {
			if m := policyKeyName.FindStringSubmatch(line.tokens[0].text); m != nil && own[m[1]] {
				keyUnits[line.unit] = true
			}
		}
	}
	for _, line := range md.commands {
		if line.loose || !line.aboutPolicy || len(line.tokens) == 0 {
			continue
		}
		span := line.tokens[0].text
		if len(line.tokens) > 1 && !strings.HasSuffix(span, ":") {
			continue
		}
		if m := policyKeyName.FindStringSubmatch(span); m != nil {
			if keyUnits[line.unit] && !names[m[1]] && !outputs[m[1]] && notPolicyKeys[m[1]] == "" {
				out = append(out, fmt.Sprintf("%d: the policy has no key named %s (nor is it in notPolicyKeys)", line.tokens[0].line, m[1]))
			}
			continue
		}
		m := policyPath.FindStringSubmatch(span)
		if m == nil {
			continue
		}
		segments := strings.Split(regexp.MustCompile(`\[[0-9]*\]`).ReplaceAllString(m[1], ""), ".")
		if _, top := schema.fields[segments[0]]; !top || fileSuffixes[segments[len(segments)-1]] {
			continue
		}
		if !schema.resolve(segments) {
			out = append(out, fmt.Sprintf("%d: the policy has no key %s", line.tokens[0].line, m[1]))
		}
	}
	for _, tb := range md.tables {
		out = append(out, tableKeyProblems(schema, tb)...)
	}
	return out, examples
}

// policyKeyName is a code span that names one policy key alone, camelCase as
// the policy's keys are: `passWithinSeconds`, `keepRemediationHold: true`.
var policyKeyName = regexp.MustCompile(`^([a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)(?::.*)?$`)

// notPolicyKeys are camelCase names that the docs write beside a policy key
// (in one paragraph, list item or table cell that speaks of the policy) and
// that are no policy key, each with what it is. The keys of our own JSON
// output (`capi-inplace status` and `plan -o json`, which report the policy's
// settings under names of their own) need no entry: see outputKeyNames.
var notPolicyKeys = map[string]string{
	"kubernetesVersions": "Cluster API's ClusterClass spec.kubernetesVersions, beside kubernetesBinaries",
	"imagePullPolicy":    "a KubeadmConfig nodeRegistration field, beside acceptBootstrapOnlyFields in docs/planner.md",
}

// outputKeyNames are the keys, at any depth, of the JSON that `capi-inplace
// status` and `capi-inplace plan` print.
func outputKeyNames() map[string]bool {
	names := map[string]bool{}
	for _, t := range []reflect.Type{reflect.TypeFor[status.Report](), reflect.TypeFor[preview.Report]()} {
		schemaOf(t).names(names)
	}
	return names
}

// names adds the name of every key of the policy, at any depth, to into.
func (s *keySchema) names(into map[string]bool) map[string]bool {
	if s == nil {
		return into
	}
	s.elem.names(into)
	for k, sub := range s.fields {
		into[k] = true
		sub.names(into)
	}
	return into
}

// schemaObject is an object of the policy and its path.
type schemaObject struct {
	path string
	s    *keySchema
}

// objects are every object of the policy, the root first, then by path.
func (s *keySchema) objects() []schemaObject {
	var out []schemaObject
	var walk func(s *keySchema, path string)
	walk = func(s *keySchema, path string) {
		for s != nil && s.elem != nil {
			s, path = s.elem, path+"[]"
		}
		if s == nil || s.fields == nil {
			return
		}
		out = append(out, schemaObject{path: path, s: s})
		for k, sub := range s.fields {
			walk(sub, strings.TrimPrefix(path+"."+k, "."))
		}
	}
	walk(s, "")
	slices.SortFunc(out, func(a, b schemaObject) int { return strings.Compare(a.path, b.path) })
	return out
}

// tableKey is a key as a table's first cell names it, from a section of the
// policy or relative to one: `timeoutSeconds`, `httpGet.url`,
// `gates[].gates[].name`, `kubernetesBinaries.<version>`.
var tableKey = regexp.MustCompile(`^([a-z][A-Za-z0-9]*(?:\[[0-9]*\])?(?:\.(?:<[^>]*>|[a-z][A-Za-z0-9]*)(?:\[[0-9]*\])?)*)(?::.*)?$`)

// keySegments splits a key path into its keys (list indices dropped).
func keySegments(path string) []string {
	return strings.Split(regexp.MustCompile(`\[[0-9]*\]`).ReplaceAllString(path, ""), ".")
}

// tableKeyProblems checks the keys a table's rows name in their first cell,
// each relative to the section the table is about: the policy path its
// heading names (a heading `deadlines`), or else the one object of the policy
// that has the most of them. A table none of whose keys, or only one, is a
// policy key, or none but lower-case words, is about something else and not
// checked. In a cell that names
// several keys, the later ones may be relative to the first one's parent
// (`httpGet.expectedStatusMin`, `expectedStatusMax`).
func tableKeyProblems(schema *keySchema, tb mdTable) []string {
	type key struct {
		segments, parent []string
		text             string
		line             int
	}
	var keys []key
	for _, row := range tb.rows {
		var parent []string
		for i, m := range codeSpan.FindAllStringSubmatch(row.first, -1) {
			km := tableKey.FindStringSubmatch(m[1])
			if km == nil {
				continue
			}
			k := key{segments: keySegments(km[1]), text: km[1], line: row.line}
			if i == 0 {
				parent = k.segments[:len(k.segments)-1]
			} else {
				k.parent = parent
			}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	resolves := func(base *keySchema, k key) bool {
		return base.resolve(k.segments) || (len(k.parent) > 0 && base.resolve(append(slices.Clone(k.parent), k.segments...)))
	}
	count := func(base *keySchema) int {
		n := 0
		for _, k := range keys {
			if resolves(base, k) {
				n++
			}
		}
		return n
	}
	var base *schemaObject
	objects := schema.objects()
	for _, m := range codeSpan.FindAllStringSubmatch(tb.heading, -1) {
		for i, o := range objects {
			// The heading's section, when the table names keys of it at all.
			if o.path != "" && strings.ReplaceAll(o.path, "[]", "") == strings.ReplaceAll(m[1], "[]", "") && count(o.s) > 0 {
				base = &objects[i]
			}
		}
	}
	if base == nil {
		best := 0
		for i, o := range objects {
			if n := count(o.s); n > best {
				best, base = n, &objects[i]
			}
		}
		if best < 2 {
			return nil
		}
		// A lower-case word alone (`rauc`, `name`) is no evidence: it is a
		// key of the policy and a word of many other things.
		if !slices.ContainsFunc(keys, func(k key) bool {
			return (len(k.segments) > 1 || policyKeyName.MatchString(k.text)) && resolves(base.s, k)
		}) {
			return nil
		}
	}
	var out []string
	for _, k := range keys {
		if !resolves(base.s, k) {
			at := "at the top level"
			if base.path != "" {
				at = "under " + base.path
			}
			out = append(out, fmt.Sprintf("%d: the policy has no key %s %s (the section of the table's other keys)", k.line, k.text, at))
		}
	}
	return out
}

// TestDocsNameOnlyRealPolicyKeys: every policy key a doc names exists in the
// policy's Go types: the keys of each YAML example whose top-level keys include
// a policy section (every key at every depth), and each code span that names a
// setting by its path from a top-level section in a paragraph that speaks of the
// policy (`fleet.failures` of the status report is no policy key).
func TestDocsNameOnlyRealPolicyKeys(t *testing.T) {
	schema := schemaOf(reflect.TypeFor[policy.Config]())
	total := 0
	for _, doc := range docFiles(t) {
		problems, examples := policyKeyProblems(schema, parseMarkdown(readDoc(t, doc)))
		total += examples
		for _, p := range problems {
			t.Errorf("%s:%s", doc, p)
		}
	}
	if total < 5 {
		t.Errorf("found %d policy examples in the docs: is the example detection broken?", total)
	}
}

// isPolicyExample: a YAML document that is not a Kubernetes object and has a
// top-level policy section.
func isPolicyExample(n *kyaml.Node, schema *keySchema) bool {
	if n.Kind == kyaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != kyaml.MappingNode {
		return false
	}
	var keys []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys = append(keys, n.Content[i].Value)
	}
	if slices.Contains(keys, "apiVersion") {
		return false
	}
	return slices.ContainsFunc(keys, func(k string) bool { _, ok := schema.fields[k]; return ok })
}

// TestDocsChecksCatchMistakes: the checks find what they are for, at its line,
// and leave other programs' flags, other documents' keys and prose alone.
func TestDocsChecksCatchMistakes(t *testing.T) {
	fc := newFlagChecker(commandTrees(t))
	keys := ourKeys(t)
	schema := schemaOf(reflect.TypeFor[policy.Config]())
	tests := []struct {
		name string
		doc  string
		want []string // the problems, in order
	}{
		{name: "an extension flag that is not", doc: "Run\n`capi-inplace extension --policy=/etc/p.yaml`.\n",
			want: []string{"2: `capi-inplace extension` has no flag --policy"}},
		{name: "a removed flag in a shell block", doc: "```sh\ncapi-inplace extension \\\n  --webhook-port 9443 \\\n  --staging-timeout=10m\n```\n",
			want: []string{"4: `capi-inplace extension` has no flag --staging-timeout"}},
		{name: "a flag of another subcommand", doc: "`capi-inplace plan -A`, `kubectl inplace status --filename x`\n",
			want: []string{"1: `capi-inplace plan` has no flag -A", "1: `kubectl inplace status` has no flag --filename"}},
		{name: "shorthands, values and subcommands", doc: "```sh\nkubectl inplace status -A -o wide -w --interval 5s\nsudo NODE_NAME=n1 capi-inplace-agent agent --host-root=/host --v 1 # comment --nope\n```\n"},
		{name: "a loose flag in prose", doc: "the extension's\n(--policy file)\n", want: []string{"2: --policy is a flag of no command of ours (nor in upstreamFlags)"}},
		{name: "a code span across lines", doc: "runs `init --core cluster-api\n--control-plane kubeadm` and `capi-inplace status\n--watchh`\n",
			want: []string{"3: `capi-inplace status` has no flag --watchh"}},
		{name: "other programs' flags", doc: "`kubeadm upgrade apply v1.36.0 --yes`\n```sh\nclusterctl init --infrastructure docker | kubectl apply --server-side -f -\n```\n"},
		{name: "an upstream flag in prose", doc: "kubeadm's `--skip-phases=preflight`\n"},
		{name: "a subcommand that is gone", doc: "`capi-inplace demo` and `capi-inplace agent --host-root=/host`\n",
			want: []string{"1: `capi-inplace` has no subcommand demo", "1: `capi-inplace` has no subcommand agent"}},
		{name: "a subcommand on its own", doc: "the DaemonSet's `agent --host-root=/host`; `status -w --nope`\n",
			want: []string{"1: `capi-inplace status` has no flag --nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fc.problems(parseMarkdown(tt.doc)); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	annotations := "label it `inplace.capi-inplace.dev/enabled=true`, remove it with\n`inplace.capi-inplace.dev/enabled-`; not guard.inplace.capi-inplace.dev/x nor\nstatus.inplace.capi-inplace.dev/v1alpha1, but inplace.capi-inplace.dev/retried\n"
	if got, want := annotationProblems(keys, annotations), []string{"3: inplace.capi-inplace.dev/retried is no annotation or label key of ours (api/v1alpha1)"}; !slices.Equal(got, want) {
		t.Errorf("annotations: got %q, want %q", got, want)
	}

	policyDoc := "The policy's `drain.evict` and `deadlines.stagingSeconds`.\n\n`fleet.failures` of status.\n" +
		"```yaml\ndeadlines:\n  staging: 10\ngates:\n- cluster: a/b\n  gates:\n  - name: x\n    httpGet: {url: https://x, expectedStatus: 200}\nosBackends:\n- config:\n    rauc: {conf: /c, keyfile: /k}\nartifacts:\n- image: {id: 0f3c9a, anything: goes}\n```\n\n" +
		"```yaml\napiVersion: v1\nkind: ConfigMap\ndrain: {}\n```\n"
	got, examples := policyKeyProblems(schema, parseMarkdown(policyDoc))
	want := []string{
		"6: the policy has no key deadlines.staging",
		"11: the policy has no key gates[].gates[].httpGet.expectedStatus",
		"14: the policy has no key osBackends[].config.rauc.keyfile",
		"1: the policy has no key drain.evict",
	}
	if !slices.Equal(got, want) || examples != 1 {
		t.Errorf("policy keys: got %q in %d examples, want %q in 1", got, examples, want)
	}

	// Keys named alone, and relative to their section in tables.
	keyTests := []struct {
		name string
		doc  string
		want []string
	}{
		{name: "a key alone beside a real one", doc: "The policy's `passWithinSeconds` and\n`passWithinSecond: 20`.\n",
			want: []string{"2: the policy has no key named passWithinSecond (nor is it in notPolicyKeys)"}},
		{name: "another API's field in its own list item", doc: "Policy:\n- `soakSeconds` waits\n- KCP's `maxSurge: 0`\n"},
		{name: "another API's field with no policy key beside it", doc: "The policy and the KCP's `maxSurge`.\n"},
		{name: "an output's key beside a policy key", doc: "The policy's `soakSeconds` and status's `budgetSpent`.\n"},
		{name: "allowed beside a key", doc: "The policy's `kubernetesBinaries` and the class's `kubernetesVersions`.\n"},
		{name: "a table under a section's heading", doc: "### `fleet[]` and `deadlines`\n\n| key | meaning |\n|---|---|\n| `stagingSeconds` | x |\n| `stagingTimeout: 30` | y |\n",
			want: []string{"6: the policy has no key stagingTimeout under deadlines (the section of the table's other keys)"}},
		{name: "a table relative to the section its keys share", doc: "## Policy\n\n| field | meaning |\n|---|---|\n| `name` | a |\n| `httpGet.url` | b |\n| `httpGet.expectedStatusMin`, `expectedStatusMax` | c |\n| `passWithinSecs` | d |\n",
			want: []string{"8: the policy has no key passWithinSecs under gates[].gates[] (the section of the table's other keys)"}},
		{name: "a table of other fields", doc: "| field | in place |\n|---|---|\n| `clusterConfiguration.apiServer` | yes |\n| `maxSurge` | no |\n| `name` | no |\n"},
		{name: "a table of words that are keys too", doc: "| backend | on the node |\n|---|---|\n| `rauc` | a |\n| `bootc` | b |\n| `none` | c |\n"},
		{name: "the reference's full paths", doc: "| key |\n|---|\n| `gates[].gates[].cel.expression` |\n| `kubernetesBinaries.<version>.<platform>.kubeadm.url` |\n| `fleet[].soakSeconds` |\n| `fleet[].soakSecond` |\n",
			want: []string{"6: the policy has no key fleet[].soakSecond at the top level (the section of the table's other keys)"}},
	}
	for _, tt := range keyTests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := policyKeyProblems(schema, parseMarkdown(tt.doc)); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
