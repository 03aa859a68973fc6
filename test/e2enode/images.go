//go:build e2enode

package e2enode

import (
	"context"
	"strings"
)

// mirrorAddr is where the lane's registry mirror of registry.k8s.io listens
// (hack/realnode/node.sh configures every node's containerd with it): a node starts
// with its own release's images only, so the upgrade's images come from here.
var mirrorAddr = hostIP + ":5123"

// nodeImages lists the image references in the node's containerd (the CRI's
// namespace, what the kubelet and kubeadm see).
func nodeImages(ctx context.Context, n Node) (map[string]bool, error) {
	out, err := lane.Exec(ctx, n, "ctr", "-n", "k8s.io", "images", "ls", "-q")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, ref := range strings.Fields(out) {
		have[ref] = true
	}
	return have, nil
}

// missingImages returns those of refs the node's containerd does not hold.
func missingImages(ctx context.Context, n Node, refs []string) ([]string, error) {
	have, err := nodeImages(ctx, n)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, r := range refs {
		if !have[r] {
			missing = append(missing, r)
		}
	}
	return missing, nil
}
