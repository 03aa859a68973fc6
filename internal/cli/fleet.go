package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/status"
)

// NewFleetCommand is `<prog> fleet`: views across many Clusters.
func NewFleetCommand(prog string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Look at many Clusters at once",
	}
	cmd.AddCommand(newFleetStatusCommand(prog))
	return cmd
}

type fleetStatusOptions struct {
	kube          kubeFlags
	allNamespaces bool
	selector      string
	failedOnly    bool
	output        string
}

func newFleetStatusCommand(prog string) *cobra.Command {
	o := &fleetStatusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One line per Cluster: versions, OS images, Machines up to date, state, since when",
		Long: `fleet status prints one line per Cluster of the namespace (or of every namespace
with -A): the Kubernetes versions its Machines ask for, the OS images its nodes
report, how many of its Machines run the version they ask for, its state and since
when, and why. A summary line counts the Clusters by state.

States: UpToDate; Updating (a Machine is being updated in place); Failed (a
Machine's last update rolled back, failed, is Degraded, was never picked up or
passed a deadline: the message names it); Outdated (a Machine does not run the
version it asks for and nothing updates it yet); and the fleet controls' Paused,
Halted, WindowClosed and Soaking when they hold work back.

Everything is read from the management cluster alone, Clusters and Machines in one
list call each: no workload cluster is dialled, so a thousand clusters answer as
fast as one. For one Cluster's nodes (agent phase, drain, progress), use status.

Exit codes: 0 no Cluster failed; 1 the command failed; 3 at least one Cluster is
Failed.`,
		Example: strings.NewReplacer("PROG", prog).Replace(`  PROG fleet status -A
  PROG fleet status -n stores -l site=eu-west --failed
  PROG fleet status -A -o json | jq '.clusters[] | select(.state == "Failed") | .name'`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.kube = newKubeFlags(f)
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "show Clusters of every namespace")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector over Clusters (e.g. site=eu-west,tier!=canary)")
	f.BoolVar(&o.failedOnly, "failed", false, "list only Failed Clusters (the summary still counts every selected Cluster)")
	addOutputFlag(f, &o.output)
	return cmd
}

func (o *fleetStatusOptions) run(ctx context.Context, out io.Writer) error {
	output, err := parseOutput(o.output)
	if err != nil {
		return err
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("--selector: %w", err)
	}
	c, namespace, err := o.kube.readClient("capi-inplace-fleet-status", clusterv1.AddToScheme)
	if err != nil {
		return err
	}
	if o.allNamespaces {
		namespace = ""
	}
	clusters := &clusterv1.ClusterList{}
	if err := c.List(ctx, clusters, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("list Clusters: %w", err)
	}
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("list Machines: %w", err)
	}
	now := time.Now()
	l := status.BuildFleetList(clusters.Items, machines.Items, now)
	failed := l.Summary.Failed
	if o.failedOnly {
		kept := l.Clusters[:0]
		for _, line := range l.Clusters {
			if line.State == status.ClusterFailed {
				kept = append(kept, line)
			}
		}
		l.Clusters = kept
	}
	switch output {
	case OutputJSON:
		err = status.RenderJSON(out, l, true)
	case OutputYAML:
		err = status.RenderYAML(out, l)
	default:
		err = status.RenderFleetTable(out, l, now)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{code: ExitNodeFailed, err: fmt.Errorf("%d Cluster(s) failed", failed)}
	}
	return nil
}
