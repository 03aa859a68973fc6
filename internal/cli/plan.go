package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
	"github.com/capi-inplace/capi-inplace/internal/backend/swupdate"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// newManagementClient connects to the management cluster. plan only reads through
// it; the test wraps it with an interceptor that fails every write.
type newManagementClient func(cfg *rest.Config, scheme *runtime.Scheme) (client.Client, error)

type planOptions struct {
	kube       kubeFlags
	policyFile string
	filename   string
	output     string
	prog       string
	newClient  newManagementClient
}

// NewPlanCommand is `<prog> plan`; prog is how the user typed the CLI
// ("capi-inplace" or "kubectl inplace"), for the examples.
func NewPlanCommand(prog string) *cobra.Command {
	return newPlanCommandWith(prog, func(cfg *rest.Config, scheme *runtime.Scheme) (client.Client, error) {
		return client.New(cfg, client.Options{Scheme: scheme})
	})
}

func newPlanCommandWith(prog string, newClient newManagementClient) *cobra.Command {
	o := &planOptions{prog: prog, newClient: newClient}
	cmd := &cobra.Command{
		Use:   "plan [cluster]",
		Short: "Say, per machine, whether a change would go in place or replace it (no writes)",
		Long: `plan compares each Machine of a Cluster with what its owner desires and says, per
Machine, whether Cluster API with capi-inplace would update it in place or replace it,
why (the planner's reason for every field it refuses, and the rollout settings that
make Cluster API create a new machine anyway), whether its node is drained and
rebooted, and which OS backend would run.

Without -f it compares with what the KubeadmControlPlane and MachineDeployments desire
now. With -f it first merges a proposed change over the live objects, in memory: a
Cluster with a new spec.topology.version, a KubeadmControlPlane, a MachineDeployment,
a KubeadmConfigTemplate or an infrastructure template. Each object is merged like a
JSON merge patch (maps merge, lists replace); new objects (a new template) are added.

plan never writes to the management cluster. It assumes Cluster API runs with the
InPlaceUpdates and RuntimeSDK feature gates and that capi-inplace answers the in-place
hooks for the Cluster's namespace; --policy-file should be the extension's policy.

-o wide adds each Machine's node and the hook path Cluster API would take. -o json
and -o yaml print one document (apiVersion plan.inplace.capi-inplace.dev/v1alpha1,
kind InPlacePlan; see docs/plan.md).

Exit codes: 0 no machine would be replaced; 2 at least one machine would be
replaced; 1 the command failed.`,
		Example: strings.NewReplacer("PROG", prog).Replace(`  PROG plan my-cluster -n clusters
  PROG plan -n clusters -f upgrade.yaml --policy-file policy.yaml
  PROG plan my-cluster -f upgrade.yaml -o json | jq '.machines[] | {name, verdict, reasons}'`),
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster := ""
			if len(args) == 1 {
				cluster = args[0]
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.InOrStdin(), cluster)
		},
	}
	f := cmd.Flags()
	// -n: the Cluster's namespace (default: the change's namespace, else the context's, else "default").
	o.kube = newKubeFlags(f)
	f.StringVar(&o.policyFile, "policy-file", "", "the extension's policy file (YAML or JSON); empty means the built-in policy")
	f.StringVarP(&o.filename, "filename", "f", "", "proposed change: a YAML file of one or more objects (- reads stdin)")
	addOutputFlag(f, &o.output)
	return cmd
}

func (o *planOptions) run(ctx context.Context, out io.Writer, in io.Reader, cluster string) error {
	output, err := parseOutput(o.output)
	if err != nil {
		return err
	}
	pol, err := LoadPolicy(o.policyFile)
	if err != nil {
		return err
	}
	pl, err := planner.New(pol)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	change, err := o.readChange(in)
	if err != nil {
		return err
	}
	if cluster == "" {
		if cluster = preview.ClusterNameOf(change); cluster == "" {
			return fmt.Errorf("name the Cluster: %s plan <cluster> [-f change.yaml]", o.prog)
		}
	}
	c, namespace, err := o.connect(change)
	if err != nil {
		return err
	}

	// A ClusterClass naming the extension's GenerateUpgradePlan hook (shipped
	// ExtensionConfig name capi-inplace) is planned with the hook's own plan, as the
	// guard does: the first step of a chained upgrade.
	// The Secrets the KubeadmConfigs reference are counted as the hooks count them;
	// a user who may not read Secrets gets a note instead.
	g := preview.Gatherer{Reader: c, Upgrades: &preview.ChainedUpgrades{Planner: pl, Extension: planner.UpgradePlanHandler + ".capi-inplace"}, Secrets: c, SecretsOptional: true}
	live, notes, err := g.Gather(ctx, namespace, cluster)
	if err != nil {
		return err
	}
	proposed := live
	if change != nil {
		var changeNotes []string
		if proposed, changeNotes, err = g.Propose(ctx, &live, change); err != nil {
			return err
		}
		notes = append(notes, changeNotes...)
	}
	r, err := preview.Build(preview.Input{
		Live: live, Proposed: proposed, Planner: pl, Policy: pol,
		Backends: planBackendCapabilities(ctx), Now: time.Now(), Change: o.filename, Notes: notes,
	})
	if err != nil {
		return err
	}
	switch output {
	case OutputJSON:
		err = preview.RenderJSON(out, r)
	case OutputYAML:
		err = renderYAML(out, r)
	case OutputWide:
		err = preview.RenderWideTable(out, r)
	default:
		err = preview.RenderTable(out, r)
	}
	if err != nil {
		return err
	}
	return exitForPlan(r)
}

func (o *planOptions) readChange(in io.Reader) ([]*unstructured.Unstructured, error) {
	var (
		data []byte
		err  error
	)
	switch o.filename {
	case "":
		return nil, nil
	case "-":
		data, err = io.ReadAll(in)
	default:
		data, err = os.ReadFile(o.filename)
	}
	if err != nil {
		return nil, fmt.Errorf("read change %s: %w", o.filename, err)
	}
	change, err := preview.ParseChange(data)
	if err != nil {
		return nil, fmt.Errorf("change %s: %w", o.filename, err)
	}
	return change, nil
}

// exitForPlan turns replaced machines into ExitReplace.
func exitForPlan(r preview.Report) error {
	var replaced []string
	for _, m := range r.Machines {
		if m.Verdict == preview.VerdictReplace {
			replaced = append(replaced, m.Name)
		}
	}
	if len(replaced) == 0 {
		return nil
	}
	return &exitError{code: ExitReplace, err: fmt.Errorf("%d machine(s) would be replaced: %s", len(replaced), strings.Join(replaced, ", "))}
}

// connect builds the management cluster client the way kubectl does and returns the
// namespace to look at.
func (o *planOptions) connect(change []*unstructured.Unstructured) (client.Reader, string, error) {
	cfg, err := o.kube.restConfig("capi-inplace-plan")
	if err != nil {
		return nil, "", err
	}
	if cfg.QPS == 0 {
		// One Get per referenced object: allow what kubectl allows, not client-go's 5/s.
		cfg.QPS, cfg.Burst = 50, 300
	}
	namespace, explicit, err := o.kube.namespace()
	if err != nil {
		return nil, "", err
	}
	if !explicit {
		// No -n: the change's namespace, else the context's.
		for _, u := range change {
			if ns := u.GetNamespace(); ns != "" {
				namespace = ns
				break
			}
		}
	}
	scheme := runtime.NewScheme()
	// Secrets (corev1): the ones the KubeadmConfigs reference are counted.
	for _, add := range []func(*runtime.Scheme) error{clusterv1.AddToScheme, controlplanev1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, "", fmt.Errorf("scheme: %w", err)
		}
	}
	c, err := o.newClient(cfg, scheme)
	if err != nil {
		return nil, "", fmt.Errorf("client for the management cluster: %w", err)
	}
	// Only a reader goes further: the plan has no way to write.
	return c, namespace, nil
}

// planBackendCapabilities returns the capabilities of the OS backends, built the way
// the agent builds them (registry.Build) but with placeholder settings and a runner
// that refuses to run anything: Capabilities is a property of the mechanism, not of
// a node. The script backend is left out: its capabilities are declared per node.
func planBackendCapabilities(ctx context.Context) map[string]backend.Capabilities {
	cfg := registry.Config{
		StateDir: "/var/lib/capi-inplace/os-backends",
		OSTree:   &registry.OSTreeConfig{OSName: "default", Flavor: "ostree"},
		Bootc:    &registry.BootcConfig{},
		RAUC:     &registry.RAUCConfig{},
		SWUpdate: &registry.SWUpdateConfig{Slots: []swupdate.Slot{
			{Name: "a", Device: "/dev/slot-a", Selection: "stable,a"}, {Name: "b", Device: "/dev/slot-b", Selection: "stable,b"},
		}},
		Mender:   &registry.MenderConfig{},
		Packages: &registry.PackagesConfig{Manager: "apt"},
	}
	// os.DevNull as the host root: no node file is read (rauc looks for its system.conf).
	built := registry.Build(ctx, cfg, registry.Env{HostRoot: os.DevNull, Runner: refusingRunner{}})
	// The simulated backend of the test harness is not linked into this binary: plan
	// assumes a reboot for it, as for any backend it does not know.
	out := map[string]backend.Capabilities{
		none.Name: none.New().Capabilities(),
	}
	for name, b := range built {
		if _, unavailable := b.(registry.Unavailable); unavailable {
			continue
		}
		out[name] = b.Capabilities()
	}
	return out
}

// refusingRunner runs nothing: plan never touches a host.
type refusingRunner struct{}

func (refusingRunner) Run(_ context.Context, cmd backend.Command) (backend.Result, error) {
	return backend.Result{}, fmt.Errorf("plan runs no commands (asked to run %s)", cmd)
}

// renderYAML writes a plan report as YAML: the JSON document's fields, so that
// `yq` and `jq` see the same names.
func renderYAML(w io.Writer, r preview.Report) error {
	b, err := yaml.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode plan: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}
