package planner

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/runtime"
)

// fieldPath is a path of map keys below an object's root.
type fieldPath []string

func (p fieldPath) String() string { return strings.Join(p, ".") }

// hasPrefix reports whether prefix is p or one of p's ancestors.
func (p fieldPath) hasPrefix(prefix []string) bool {
	return len(p) >= len(prefix) && slices.Equal(p[:len(prefix)], prefix)
}

// leafDiffs returns the paths (relative to the compared maps) at which cur and des
// differ. Maps are walked key by key, a missing map being walked as an empty one,
// so a difference is reported at the deepest path that tells it: a scalar, a list
// (lists are compared whole), a type change, or the presence of an empty map.
func leafDiffs(cur, des map[string]any) []fieldPath {
	var out []fieldPath
	walkDiff(cur, des, nil, &out)
	return out
}

func walkDiff(cur, des map[string]any, prefix fieldPath, out *[]fieldPath) {
	keys := make([]string, 0, len(cur)+len(des))
	for k := range cur {
		keys = append(keys, k)
	}
	for k := range des {
		if _, ok := cur[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		cv, cok := cur[k]
		dv, dok := des[k]
		path := append(slices.Clip(prefix), k)
		cm, cIsMap := cv.(map[string]any)
		dm, dIsMap := dv.(map[string]any)
		switch {
		case cIsMap && dIsMap:
			walkDiff(cm, dm, path, out)
		case cIsMap && !dok, dIsMap && !cok:
			// One side lacks the whole map: walk the other against an empty map, and
			// report an empty map's presence itself (CAPI compares unstructured specs,
			// where {} and absent differ).
			m := cm
			if dIsMap {
				m = dm
			}
			if len(m) == 0 {
				*out = append(*out, path)
				continue
			}
			if cIsMap {
				walkDiff(cm, nil, path, out)
			} else {
				walkDiff(nil, dm, path, out)
			}
		case cok != dok || !reflect.DeepEqual(cv, dv):
			*out = append(*out, path)
		}
	}
}

// lookup returns the value at path in obj.
func lookup(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[k]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

// copyField makes target equal to src at path: it sets the value (creating parent
// maps) or, when src has nothing there, deletes it and removes parent maps that are
// left empty and that src does not have either. Parents never go above stop, the
// root of the compared part of the object (e.g. spec).
func copyField(target, src map[string]any, path []string, stop int) {
	if v, ok := lookup(src, path); ok {
		m := target
		for _, k := range path[:len(path)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[path[len(path)-1]] = runtime.DeepCopyJSONValue(v)
		return
	}
	for depth := len(path); depth > stop; depth-- {
		parentVal, ok := lookup(target, path[:depth-1])
		if !ok {
			return
		}
		parent, ok := parentVal.(map[string]any)
		if !ok {
			return
		}
		child, ok := parent[path[depth-1]].(map[string]any)
		if depth < len(path) && (!ok || len(child) > 0) {
			return
		}
		if depth < len(path) {
			if _, inSrc := lookup(src, path[:depth]); inSrc {
				return
			}
		}
		delete(parent, path[depth-1])
	}
}

// makePatch returns the RFC 6902 patch (a JSON array) that turns current into
// current-with-the-covered-fields-of-desired, or nil when no field is covered.
//
// Only the subtrees that can differ are encoded and diffed (see patchCuts): the
// answer is the patch of the whole objects, at a fraction of the allocations (the
// whole-object diff encoded and decoded metadata and status twice on every call).
func makePatch(current, desired map[string]any, covered []fieldPath, stop int) ([]byte, error) {
	if len(covered) == 0 {
		return nil, nil
	}
	target := copyAlong(current, covered, stop)
	for _, p := range covered {
		copyField(target, desired, p, stop)
	}
	var ops []jsonpatch.Operation
	for _, cut := range patchCuts(current, target, covered) {
		curVal, _ := lookup(current, cut)
		targetVal, _ := lookup(target, cut)
		curJSON, err := json.Marshal(curVal)
		if err != nil {
			return nil, fmt.Errorf("marshal current object at %s: %w", fieldPath(cut), err)
		}
		targetJSON, err := json.Marshal(targetVal)
		if err != nil {
			return nil, fmt.Errorf("marshal patched object at %s: %w", fieldPath(cut), err)
		}
		sub, err := jsonpatch.CreatePatch(curJSON, targetJSON)
		if err != nil {
			return nil, fmt.Errorf("create JSON patch at %s: %w", fieldPath(cut), err)
		}
		prefix := pointer(cut)
		for _, op := range sub {
			op.Path = prefix + op.Path
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	// Sorting by path keeps the output stable, so equal requests get equal answers.
	// CreatePatch orders list removals so that indexes stay valid; keep its order
	// for operations on the same list.
	slices.SortStableFunc(ops, func(a, b jsonpatch.Operation) int {
		return strings.Compare(listRoot(a.Path), listRoot(b.Path))
	})
	out, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("marshal JSON patch: %w", err)
	}
	return out, nil
}

// copyAlong returns a copy of obj that copyField may edit at the covered paths
// without touching obj: the maps above the compared root (stop keys deep) are
// copied shallowly, the compared root's maps deeply, the rest (metadata, status)
// is shared with obj.
func copyAlong(obj map[string]any, covered []fieldPath, stop int) map[string]any {
	out := maps.Clone(obj)
	if out == nil {
		out = map[string]any{}
	}
	// Every covered path starts with the same stop keys (the compared root).
	root := covered[0][:min(stop, len(covered[0]))]
	m := out
	for i, k := range root {
		child, ok := m[k].(map[string]any)
		if !ok {
			// Absent (copyField creates it in the copy) or not an object (copyField
			// replaces it in the copy): nothing of obj below to protect.
			return out
		}
		if i == len(root)-1 {
			m[k] = runtime.DeepCopyJSONValue(child)
			return out
		}
		child = maps.Clone(child)
		m[k] = child
		m = child
	}
	return runtime.DeepCopyJSONValue(obj).(map[string]any)
}

// patchCuts returns the roots of the subtrees where current and target (current
// after copyField of the covered paths) can differ, none inside another. copyField
// changes a covered path's value, or removes it and parents it leaves empty, or
// creates its missing parents: every change lies below the longest prefix of the
// path that both objects have, and JSON-patch diffs compose over object keys (the
// diff of an object is its keys' diffs), so the patch of the whole objects is the
// union of the patches of these subtrees.
func patchCuts(current, target map[string]any, covered []fieldPath) [][]string {
	var cuts [][]string
	for _, p := range covered {
		n := len(p)
		for ; n > 0; n-- {
			_, inCur := lookup(current, p[:n])
			_, inTarget := lookup(target, p[:n])
			if inCur && inTarget {
				break
			}
		}
		cuts = append(cuts, p[:n])
	}
	// Shorter first, so that a cut inside an earlier one is found and dropped.
	slices.SortFunc(cuts, func(a, b []string) int { return len(a) - len(b) })
	var out [][]string
	for _, c := range cuts {
		if !slices.ContainsFunc(out, func(o []string) bool { return fieldPath(c).hasPrefix(o) }) {
			out = append(out, c)
		}
	}
	return out
}

// pointer is the RFC 6901 JSON pointer of a path of object keys.
func pointer(path []string) string {
	var b strings.Builder
	for _, k := range path {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(k))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// listRoot cuts a JSON pointer before its first numeric segment, so that all
// operations inside one list share a sort key.
func listRoot(pointer string) string {
	segs := strings.Split(pointer, "/")
	for i, s := range segs {
		if s != "" && strings.Trim(s, "0123456789") == "" {
			return strings.Join(segs[:i], "/")
		}
	}
	return pointer
}
