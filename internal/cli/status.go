package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/status"
)

type statusOptions struct {
	kube          kubeFlags
	allNamespaces bool
	output        string
	watch         bool
	interval      time.Duration
	// policyFile is the extension's policy file; set, status adds a line per
	// fleet pool of each Cluster (budget, windows) resolved from it.
	policyFile string
}

// NewStatusCommand is `<prog> status`; prog is how the user typed the CLI
// ("capi-inplace" or "kubectl inplace"), for the examples.
func NewStatusCommand(prog string) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [cluster]",
		Short: "Show the in-place update progress of every machine of a cluster",
		Long: `status shows, for each Machine of the named Cluster (or of every Cluster in the
namespace), its role, desired Kubernetes version and its node's kubelet version, the
node agent's phase and step with a progress bar, the node's drain state, the elapsed
time, Cluster API's Updating and UpToDate conditions, and why an update failed; per
Cluster, the fleet controls (guard, failures recorded against the budget, maintenance
windows, paused, halted, cancelled).

With --policy-file (the extension's policy file), status also prints one line per
fleet pool of each Cluster, as the policy defines the pools: the pool's name and
Machines, its failure budget ("budget 1 of 1 spent, halted"), whether its
maintenance window is open, and the next opening when it is not.

Machines and Clusters are read from the management cluster (--kubeconfig, --context);
Nodes from each workload cluster through Cluster API's "<cluster>-kubeconfig" Secret.
When a workload cluster cannot be reached, its machines are still shown from the
management cluster's data, and the header says so.

-o wide adds the node, Cluster API's machine phase, the desired plan and when the
agent last reported; on pool lines, the windows, the expected update length, the
soak and the Machines. -o json and -o yaml print one document (apiVersion
status.inplace.capi-inplace.dev/v1alpha1, kind InPlaceStatus; see docs/status.md);
with --watch, json prints one compact document per line and yaml one document per
refresh, each starting with "---".

Exit codes: 0 no node failed; 1 the command failed (flags, management cluster,
unknown Cluster, unreadable policy file); 3 at least one node's plan ended Failed
or RolledBack.`,
		Example: strings.NewReplacer("PROG", prog).Replace(`  PROG status my-cluster -n clusters
  PROG status -A -o wide
  PROG status -n clusters -w
  PROG status my-cluster -n clusters --policy-file policy.yaml
  PROG status my-cluster -o json | jq '.clusters[].machines[] | {name, phase}'`),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster := ""
			if len(args) == 1 {
				cluster = args[0]
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), cluster)
		},
	}
	f := cmd.Flags()
	o.kube = newKubeFlags(f)
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "show Clusters of every namespace")
	addOutputFlag(f, &o.output)
	f.BoolVarP(&o.watch, "watch", "w", false, "refresh until interrupted (Ctrl-C)")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "refresh interval for --watch")
	f.StringVar(&o.policyFile, "policy-file", "", "the extension's policy file: adds a line per fleet pool of each Cluster (failure budget, maintenance windows)")
	return cmd
}

func (o *statusOptions) validate(cluster string) error {
	out, err := parseOutput(o.output)
	if err != nil {
		return err
	}
	o.output = out
	if o.interval <= 0 {
		return fmt.Errorf("--interval must be positive, not %s", o.interval)
	}
	if o.allNamespaces && cluster != "" {
		return errors.New("--all-namespaces cannot be used with a cluster name")
	}
	return nil
}

func (o *statusOptions) run(ctx context.Context, out, errOut io.Writer, cluster string) error {
	if err := o.validate(cluster); err != nil {
		return err
	}
	// Read once, before any API call: the extension reads its policy once too.
	var pools status.PoolResolver
	if o.policyFile != "" {
		pol, err := LoadPolicy(o.policyFile)
		if err != nil {
			return err
		}
		pools = pol
	}
	g, namespace, err := o.gatherer()
	if err != nil {
		return err
	}
	if o.allNamespaces {
		namespace = ""
	}
	look := func() (status.Report, error) {
		snap, err := g.Gather(ctx, namespace, cluster)
		if err != nil {
			return status.Report{}, err
		}
		return status.BuildWithPools(snap, time.Now(), pools), nil
	}

	if !o.watch {
		r, err := look()
		if err != nil {
			return err
		}
		if err := o.render(out, r, true); err != nil {
			return err
		}
		return exitFor(r)
	}

	var last *status.Report
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	table := o.output == OutputTable || o.output == OutputWide
	clearScreen := isTerminal(out) && table
	for {
		r, err := look()
		switch {
		case errors.Is(err, status.ErrClusterNotFound) && last == nil:
			return err
		case err != nil:
			// A management API hiccup should not end a long watch: say so and retry.
			fmt.Fprintf(errOut, "%s: %v\n", time.Now().Format(time.TimeOnly), err)
		default:
			last = &r
			if table {
				if clearScreen {
					fmt.Fprint(out, "\x1b[H\x1b[2J")
				}
				fmt.Fprintf(out, "Every %s, at %s (Ctrl-C to stop)\n\n", o.interval, r.GeneratedAt.Local().Format(time.TimeOnly))
			}
			if err := o.render(out, r, false); err != nil {
				return err
			}
			if table && !clearScreen {
				fmt.Fprintln(out)
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return ctx.Err()
			}
			return exitFor(*last)
		case <-tick.C:
		}
	}
}

// render writes one look; oneShot is false for the refreshes of --watch (compact
// JSON, one document per line; YAML documents separated by "---").
func (o *statusOptions) render(out io.Writer, r status.Report, oneShot bool) error {
	switch o.output {
	case OutputJSON:
		return status.RenderJSON(out, r, oneShot)
	case OutputYAML:
		if !oneShot {
			if _, err := io.WriteString(out, "---\n"); err != nil {
				return fmt.Errorf("write status report: %w", err)
			}
		}
		return status.RenderYAML(out, r)
	case OutputWide:
		return status.RenderWideTable(out, r)
	}
	return status.RenderTable(out, r)
}

// exitFor turns failed nodes into ExitNodeFailed.
func exitFor(r status.Report) error {
	failed := r.FailedMachines()
	if len(failed) == 0 {
		return nil
	}
	return &exitError{
		code: ExitNodeFailed,
		err:  fmt.Errorf("in-place update failed on %d machine(s): %s", len(failed), strings.Join(failed, ", ")),
	}
}

// gatherer connects to the management cluster the way kubectl does and returns the
// namespace to look at.
func (o *statusOptions) gatherer() (status.Gatherer, string, error) {
	c, namespace, err := o.kube.readClient("capi-inplace-status", clusterv1.AddToScheme, corev1.AddToScheme)
	if err != nil {
		return status.Gatherer{}, "", err
	}
	return status.Gatherer{Management: c, Workload: status.KubeconfigWorkload{Management: c}}, namespace, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
