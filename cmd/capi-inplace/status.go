package main

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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/status"
)

// exitNodeFailed is status's exit code when at least one node's in-place plan ended
// Failed or RolledBack. Any other error (bad flags, unreachable management cluster,
// unknown Cluster) exits 1.
const exitNodeFailed = 3

// exitError carries a process exit code to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

type statusOptions struct {
	kubeconfig    string
	kubeContext   string
	namespace     string
	allNamespaces bool
	output        string
	watch         bool
	interval      time.Duration
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [cluster]",
		Short: "Show the in-place update progress of every machine of a cluster",
		Long: `status shows, for each Machine of the named Cluster (or of every Cluster in the
namespace), its role, desired Kubernetes version and its node's kubelet version, the
node agent's phase and step with a progress bar, the node's drain state, the elapsed
time, Cluster API's Updating and UpToDate conditions, and why an update failed.

Machines and Clusters are read from the management cluster (--kubeconfig); Nodes from
each workload cluster through Cluster API's "<cluster>-kubeconfig" Secret. When a
workload cluster cannot be reached, its machines are still shown from the management
cluster's data, and the header says so.

-o json prints one document (apiVersion status.inplace.capi-inplace.dev/v1alpha1,
kind InPlaceStatus; see docs/status.md); with --watch, one compact document per line.

Exit codes: 0 no node failed; 1 the command failed (flags, management cluster,
unknown Cluster); 3 at least one node's plan ended Failed or RolledBack.`,
		Example: `  capi-inplace status my-cluster -n clusters
  capi-inplace status -n clusters -w
  capi-inplace status my-cluster -o json | jq '.clusters[].machines[] | {name, phase}'`,
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
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.kubeContext, "context", "", "kubeconfig context to use")
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace of the Cluster(s) (default: the context's namespace, else \"default\")")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "show Clusters of every namespace")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.BoolVarP(&o.watch, "watch", "w", false, "refresh until interrupted (Ctrl-C)")
	f.DurationVar(&o.interval, "interval", 2*time.Second, "refresh interval for --watch")
	return cmd
}

func (o *statusOptions) validate(cluster string) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output must be table or json, not %q", o.output)
	}
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
		return status.Build(snap, time.Now()), nil
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
	clearScreen := isTerminal(out) && o.output == "table"
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
			if o.output == "table" {
				if clearScreen {
					fmt.Fprint(out, "\x1b[H\x1b[2J")
				}
				fmt.Fprintf(out, "Every %s, at %s (Ctrl-C to stop)\n\n", o.interval, r.GeneratedAt.Local().Format(time.TimeOnly))
			}
			if err := o.render(out, r, false); err != nil {
				return err
			}
			if o.output == "table" && !clearScreen {
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

func (o *statusOptions) render(out io.Writer, r status.Report, oneShot bool) error {
	if o.output == "json" {
		return status.RenderJSON(out, r, oneShot)
	}
	return status.RenderTable(out, r)
}

// exitFor turns failed nodes into exitNodeFailed.
func exitFor(r status.Report) error {
	failed := r.FailedMachines()
	if len(failed) == 0 {
		return nil
	}
	return &exitError{
		code: exitNodeFailed,
		err:  fmt.Errorf("in-place update failed on %d machine(s): %s", len(failed), strings.Join(failed, ", ")),
	}
}

// gatherer connects to the management cluster the way kubectl does and returns the
// namespace to look at.
func (o *statusOptions) gatherer() (status.Gatherer, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return status.Gatherer{}, "", fmt.Errorf("load kubeconfig of the management cluster: %w", err)
	}
	cfg.UserAgent = "capi-inplace-status"
	namespace := o.namespace
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return status.Gatherer{}, "", fmt.Errorf("namespace from kubeconfig: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clusterv1.AddToScheme(scheme); err != nil {
		return status.Gatherer{}, "", fmt.Errorf("scheme: %w", err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return status.Gatherer{}, "", fmt.Errorf("scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return status.Gatherer{}, "", fmt.Errorf("client for the management cluster: %w", err)
	}
	return status.Gatherer{Management: c, Workload: status.KubeconfigWorkload{Management: c}}, namespace, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
