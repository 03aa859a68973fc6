package planner

import (
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// declaredImageField names the OS image file in decisions.
var declaredImageField = "spec.files[path=" + policy.OSImageFile + "]"

// declaredImage returns the OS image a KubeadmConfig spec declares in
// policy.OSImageFile ("" for none).
func declaredImage(spec map[string]any) string {
	files, _ := spec["files"].([]any)
	for _, f := range files {
		m, _ := f.(map[string]any)
		if m["path"] == policy.OSImageFile {
			content, _ := m["content"].(string)
			return policy.DeclaredImage(content)
		}
	}
	return ""
}

// planDeclaredImage decides a change of the OS image declared in the bootstrap
// config's files: covered when the policy maps the new image to an artifact with
// a digest and a backend (the coordinator then switches the node's OS image),
// refused otherwise. The file itself is covered with the other files.
func (p *Planner) planDeclaredImage(kind string, bp *part, namespace, cluster string, res *Result) {
	if bp == nil {
		return
	}
	from, to := declaredImage(bp.curSpec), declaredImage(bp.desSpec)
	if from == to {
		return
	}
	d := Decision{Object: kind, Field: declaredImageField}
	if to == "" {
		d.Reason = fmt.Sprintf("%s %s is removed: there is no OS image to switch to", kind, declaredImageField)
		res.Decisions = append(res.Decisions, d)
		return
	}
	img, reason := p.policy.DeclaredOSImage(to, namespace, cluster)
	if img == nil {
		d.Reason = fmt.Sprintf("%s %s declares OS image %q: %s", kind, declaredImageField, to, reason)
	} else {
		d.Covered = true
		d.Reason = fmt.Sprintf("%s %s declares OS image %q (was %q): the node switches to OS artifact %s@%s with backend %s", kind, declaredImageField, to, from, img.Ref, img.Digest, img.Backend)
	}
	res.Decisions = append(res.Decisions, d)
}
