package nodeplan

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	texttemplate "text/template"
	"text/template/parse"
)

// The work one template may cost. A KubeadmConfig is written by a tenant, and a
// 44-byte template can otherwise render hundreds of megabytes or loop for hours, all
// inside the extension that serves every cluster. Rendering stops with ErrTooLarge at
// these limits instead; a real file template ({{ .controlPlane.version }} and a few
// conditionals) stays far below them.
const (
	// maxTemplateNodes bounds the parse-tree nodes one execution may visit, counting
	// every {{ template }} call as the nodes of the template it calls.
	maxTemplateNodes = 100_000
	// maxFuncBytes bounds the bytes printf, print, println, html, js and urlquery may
	// produce in one execution, together: values bound to variables never reach the
	// output writer, so its limit alone would not stop them.
	maxFuncBytes = 4 * maxFileBytes
)

// limitedWriter fails the write that would cross its limit, as CABPK's does, so
// text/template stops executing there instead of after the whole output exists.
type limitedWriter struct {
	w         io.Writer
	remaining int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.remaining {
		return 0, fmt.Errorf("%w: rendered output exceeds %d bytes", ErrTooLarge, maxFileBytes)
	}
	l.remaining -= len(p)
	return l.w.Write(p)
}

// checkTemplateWork refuses templates whose execution cannot be bounded up front:
// `range` over anything but the data (an integer or a function result can iterate
// for ever without writing a byte), recursive {{ template }} calls, and call trees
// that expand past maxTemplateNodes.
func checkTemplateWork(tpl *texttemplate.Template) error {
	trees := map[string]*parse.Tree{}
	for _, t := range tpl.Templates() {
		if t.Tree != nil {
			trees[t.Name()] = t.Tree
		}
	}
	w := &workCounter{trees: trees, cost: map[string]int{}, visiting: map[string]bool{}}
	n, err := w.template(tpl.Name())
	if err != nil {
		return err
	}
	if n > maxTemplateNodes {
		return fmt.Errorf("%w: template expands to more than %d nodes", ErrTooLarge, maxTemplateNodes)
	}
	return nil
}

type workCounter struct {
	trees    map[string]*parse.Tree
	cost     map[string]int
	visiting map[string]bool
}

func (w *workCounter) template(name string) (int, error) {
	if c, ok := w.cost[name]; ok {
		return c, nil
	}
	if w.visiting[name] {
		return 0, fmt.Errorf("%w: template %q calls itself", ErrTooLarge, name)
	}
	tree, ok := w.trees[name]
	if !ok || tree.Root == nil {
		// Executing an undefined template fails at run time with its own error.
		return 1, nil
	}
	w.visiting[name] = true
	c, err := w.node(tree.Root)
	delete(w.visiting, name)
	if err != nil {
		return 0, err
	}
	w.cost[name] = c
	return c, nil
}

// node returns the nodes an execution of n visits, saturating above the limit so
// that a wide call tree cannot overflow the count.
func (w *workCounter) node(n parse.Node) (int, error) {
	total := 1
	add := func(children ...parse.Node) error {
		for _, c := range children {
			if c == nil || isNilNode(c) {
				continue
			}
			k, err := w.node(c)
			if err != nil {
				return err
			}
			total = min(total+k, maxTemplateNodes+1)
		}
		return nil
	}
	var err error
	switch n := n.(type) {
	case *parse.ListNode:
		for _, c := range n.Nodes {
			if err = add(c); err != nil {
				break
			}
		}
	case *parse.ActionNode:
		err = add(n.Pipe)
	case *parse.PipeNode:
		for _, c := range n.Cmds {
			if err = add(c); err != nil {
				break
			}
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			if err = add(a); err != nil {
				break
			}
		}
	case *parse.IfNode:
		err = add(n.Pipe, n.List, n.ElseList)
	case *parse.WithNode:
		err = add(n.Pipe, n.List, n.ElseList)
	case *parse.RangeNode:
		if !rangesOverData(n.Pipe) {
			return 0, fmt.Errorf("%w: {{ range }} may only iterate over the template data, not %s", ErrTooLarge, n.Pipe)
		}
		err = add(n.Pipe, n.List, n.ElseList)
	case *parse.TemplateNode:
		if err = add(n.Pipe); err == nil {
			var k int
			if k, err = w.template(n.Name); err == nil {
				total = min(total+k, maxTemplateNodes+1)
			}
		}
	case *parse.ChainNode:
		err = add(n.Node)
	}
	if err != nil {
		return 0, err
	}
	return total, nil
}

// isNilNode catches typed nil pointers stored in parse.Node (an absent ElseList).
func isNilNode(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.ListNode:
		return n == nil
	case *parse.PipeNode:
		return n == nil
	}
	return false
}

// rangesOverData reports whether a range pipeline is a plain reference into the
// data (`.`, `.controlPlane`, `$.controlPlane`): the data is a fixed, tiny map, so
// such a range iterates at most a handful of times.
func rangesOverData(pipe *parse.PipeNode) bool {
	if pipe == nil || len(pipe.Cmds) != 1 || len(pipe.Cmds[0].Args) != 1 {
		return false
	}
	switch a := pipe.Cmds[0].Args[0].(type) {
	case *parse.DotNode, *parse.FieldNode:
		return true
	case *parse.VariableNode:
		return len(a.Ident) > 0 && a.Ident[0] == "$"
	}
	return false
}

// boundedFuncs returns replacements for text/template's string-producing built-ins
// that share one budget of maxFuncBytes per execution and refuse a call whose result
// could exceed what is left before formatting it.
func boundedFuncs() texttemplate.FuncMap {
	b := &funcBudget{remaining: maxFuncBytes}
	return texttemplate.FuncMap{
		"printf": func(format string, args ...any) (string, error) {
			if err := b.take(len(format) + formatWidths(format) + argsBound(args)); err != nil {
				return "", err
			}
			return fmt.Sprintf(format, args...), nil
		},
		"print": func(args ...any) (string, error) {
			if err := b.take(argsBound(args)); err != nil {
				return "", err
			}
			return fmt.Sprint(args...), nil
		},
		"println": func(args ...any) (string, error) {
			if err := b.take(argsBound(args) + 1); err != nil {
				return "", err
			}
			return fmt.Sprintln(args...), nil
		},
		// The escapers expand a byte to at most six ("&#34;", "\u003C", "%XX").
		"html": func(args ...any) (string, error) {
			if err := b.take(6 * argsBound(args)); err != nil {
				return "", err
			}
			return texttemplate.HTMLEscaper(args...), nil
		},
		"js": func(args ...any) (string, error) {
			if err := b.take(6 * argsBound(args)); err != nil {
				return "", err
			}
			return texttemplate.JSEscaper(args...), nil
		},
		"urlquery": func(args ...any) (string, error) {
			if err := b.take(6 * argsBound(args)); err != nil {
				return "", err
			}
			return url.QueryEscape(fmt.Sprint(args...)), nil
		},
	}
}

type funcBudget struct{ remaining int }

func (b *funcBudget) take(n int) error {
	if n > b.remaining {
		return fmt.Errorf("%w: template functions would produce more than %d bytes", ErrTooLarge, maxFuncBytes)
	}
	b.remaining -= n
	return nil
}

// argsBound is an upper bound of the formatted size of args: quoting and %x expand a
// byte to at most four, and every operand may add a type name or an error marker.
func argsBound(args []any) int {
	n := 0
	for _, a := range args {
		l := 0
		if s, ok := a.(string); ok {
			l = len(s)
		} else {
			l = len(fmt.Sprint(a))
		}
		n = min(n+4*l+64, maxFuncBytes+1)
	}
	return n
}

// formatWidths sums the widths and precisions a printf format asks for (fmt caps
// each at 1e6); a `*` counts as the largest fmt accepts.
func formatWidths(format string) int {
	const fmtMaxWidth = 1_000_000
	total := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0 {
			i++
		}
		for part := 0; part < 2 && i < len(format); part++ {
			if format[i] == '[' {
				for i < len(format) && format[i] != ']' {
					i++
				}
				i++
			}
			if i < len(format) && format[i] == '*' {
				total += fmtMaxWidth
				i++
			} else {
				j := i
				for j < len(format) && format[j] >= '0' && format[j] <= '9' {
					j++
				}
				if j > i {
					w, err := strconv.Atoi(format[i:j])
					if err != nil || w > fmtMaxWidth {
						w = fmtMaxWidth
					}
					total += w
				}
				i = j
			}
			if part == 0 && i < len(format) && format[i] == '.' {
				i++
				continue
			}
			break
		}
		total = min(total+64, maxFuncBytes+1)
	}
	return total
}
