package planner

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The KubeadmConfigSpec fields below are lists CAPI compares whole. The agent
// writes what the desired list holds, so a change is covered only when writing
// the desired list on the node gives the node what the list says; these are the
// cases where it does not.
var (
	pathFiles    = fieldPath{"files"}
	pathUsers    = fieldPath{"users"}
	pathNTP      = fieldPath{"ntp"}
	pathInitArgs = fieldPath{"initConfiguration", "nodeRegistration", "kubeletExtraArgs"}
	pathJoinArgs = fieldPath{"joinConfiguration", "nodeRegistration", "kubeletExtraArgs"}
)

// nodeApplyGap returns why a differing, otherwise covered field rel is not what
// the node would get, or "" when it is.
func nodeApplyGap(rel fieldPath, cur, des map[string]any) string {
	switch {
	case rel.hasPrefix(pathFiles):
		return filesGap(cur, des)
	case rel.hasPrefix(pathUsers):
		return usersGap(cur, des)
	case rel.hasPrefix(pathNTP):
		return ntpGap(cur, des)
	case rel.hasPrefix(pathInitArgs):
		return kubeletArgsGap(listAt(cur, pathInitArgs), listAt(des, pathInitArgs))
	case rel.hasPrefix(pathJoinArgs):
		return kubeletArgsGap(listAt(cur, pathJoinArgs), listAt(des, pathJoinArgs))
	}
	return ""
}

func listAt(spec map[string]any, p fieldPath) []map[string]any {
	v, _ := lookup(spec, p)
	items, _ := v.([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }

func byKey(items []map[string]any, key string) map[string]map[string]any {
	out := make(map[string]map[string]any, len(items))
	for _, it := range items {
		out[str(it, key)] = it
	}
	return out
}

// removed returns the keys of cur that des no longer has, sorted.
func removed(cur, des []map[string]any, key string) []string {
	d := byKey(des, key)
	var out []string
	for _, it := range cur {
		if _, ok := d[str(it, key)]; !ok {
			out = append(out, str(it, key))
		}
	}
	slices.Sort(out)
	return out
}

func filesGap(cur, des map[string]any) string {
	c, d := listAt(cur, pathFiles), listAt(des, pathFiles)
	if gone := removed(c, d, "path"); len(gone) > 0 {
		return fmt.Sprintf("files %s are removed, and the agent does not delete files from the node: the node would keep them", strings.Join(gone, ", "))
	}
	curByPath := byKey(c, "path")
	for _, f := range d {
		if b, _ := f["append"].(bool); b && !reflect.DeepEqual(curByPath[str(f, "path")], f) {
			return fmt.Sprintf("file %s has append: true, and the agent does not append in place (appending on every update would repeat the content, rewriting would drop the host's lines)", str(f, "path"))
		}
		if p := str(f, "permissions"); p != "" {
			if m, err := strconv.ParseUint(p, 8, 32); err == nil && m > 0o777 {
				return fmt.Sprintf("file %s has permissions %s with setuid, setgid or sticky bits, which the agent does not set", str(f, "path"), p)
			}
		}
	}
	return ""
}

func usersGap(cur, des map[string]any) string {
	c, d := listAt(cur, pathUsers), listAt(des, pathUsers)
	if gone := removed(c, d, "name"); len(gone) > 0 {
		return fmt.Sprintf("users %s are removed, and the agent does not delete users from the node: they would keep their accounts, keys and sudo rules", strings.Join(gone, ", "))
	}
	for _, u := range d {
		if errs := protocol.ValidateUser(str(u, "name"), str(u, "homeDir"), str(u, "passwd"), str(u, "sudo")); len(errs) > 0 {
			return errs[0].Error()
		}
	}
	return ""
}

// ntpApplied is what the agent acts on: NTP enabled (or unset) with servers.
func ntpApplied(spec map[string]any) (bool, []string) {
	v, _ := lookup(spec, pathNTP)
	n, _ := v.(map[string]any)
	enabled, set := n["enabled"].(bool)
	items, _ := n["servers"].([]any)
	var servers []string
	for _, s := range items {
		if s, ok := s.(string); ok {
			servers = append(servers, s)
		}
	}
	return (!set || enabled) && len(servers) > 0, servers
}

func ntpGap(cur, des map[string]any) string {
	curOn, _ := ntpApplied(cur)
	desOn, servers := ntpApplied(des)
	if curOn && !desOn {
		return "NTP is disabled or its servers are removed, and the agent does not turn the host's NTP client off or remove its servers: the node would keep syncing with the old servers"
	}
	for _, s := range servers {
		if err := protocol.ValidateNTPServer(s); err != nil {
			return err.Error()
		}
	}
	return ""
}

func kubeletArgsGap(cur, des []map[string]any) string {
	if gone := removed(cur, des, "name"); len(gone) > 0 {
		return fmt.Sprintf("kubelet args %s are removed, and the agent only sets args in kubeadm-flags.env: the kubelet would keep them", strings.Join(gone, ", "))
	}
	for _, a := range des {
		if err := protocol.ValidateKubeletArg(protocol.Arg{Name: str(a, "name"), Value: str(a, "value")}); err != nil {
			return err.Error()
		}
	}
	return ""
}

// unsafeUnchanged returns decisions for list fields that did not change but hold
// values the agent refuses (protocol.ErrUnsafeHostValue): the plan carries the
// whole desired lists, so such a value left from bootstrap would make the node
// refuse the plan of any other covered change. diffs are the differing fields.
func unsafeUnchanged(kind string, base []string, des map[string]any, diffs []fieldPath) []Decision {
	var out []Decision
	for _, p := range []fieldPath{pathUsers, pathNTP, pathInitArgs, pathJoinArgs} {
		if slices.ContainsFunc(diffs, func(d fieldPath) bool { return d.hasPrefix(p) || p.hasPrefix(d) }) {
			continue
		}
		var reason string
		switch {
		case p.hasPrefix(pathUsers):
			reason = usersGap(nil, des)
		case p.hasPrefix(pathNTP):
			reason = ntpGap(nil, des)
		default:
			reason = kubeletArgsGap(nil, listAt(des, p))
		}
		if reason != "" {
			f := full(base, p)
			out = append(out, Decision{Object: kind, Field: f.String(), Reason: fmt.Sprintf(
				"%s field %s does not change, but the node plan carries it and the agent refuses it: %s", kind, f, reason)})
		}
	}
	return out
}
