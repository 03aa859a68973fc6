package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// Exit codes of both spellings of the CLI (docs/cli.md).
const (
	// ExitOK: the command did what it was asked and found nothing to flag.
	ExitOK = 0
	// ExitError: the command failed (flags, kubeconfig, management cluster, unknown Cluster).
	ExitError = 1
	// ExitReplace: plan found at least one Machine that Cluster API would replace,
	// so that a CI pipeline can refuse a change that would recreate machines.
	ExitReplace = 2
	// ExitNodeFailed: status found at least one node whose plan ended Failed or
	// RolledBack (or is Degraded).
	ExitNodeFailed = 3
	// ExitInvalidPolicy: policy validate found a policy the extension would refuse
	// to start with.
	ExitInvalidPolicy = 4
)

// ExitCode is the process exit code for what a command returned: 0 for nil, the
// code of an error that carries one (ExitReplace, ExitNodeFailed), else 1.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return ExitError
}

// exitError carries a process exit code to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// Output formats of -o. Table is the default (kubectl's default has no name; "table"
// is accepted for the flag's earlier default).
const (
	OutputTable = "table"
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

var outputFormats = []string{OutputTable, OutputWide, OutputJSON, OutputYAML}

// parseOutput checks the -o value; "" is the table.
func parseOutput(s string) (string, error) {
	if s == "" {
		return OutputTable, nil
	}
	for _, f := range outputFormats {
		if s == f {
			return s, nil
		}
	}
	return "", fmt.Errorf("--output must be one of %s, not %q", strings.Join(outputFormats, ", "), s)
}

func addOutputFlag(f *pflag.FlagSet, output *string) {
	f.StringVarP(output, "output", "o", OutputTable, "output format: "+strings.Join(outputFormats, ", "))
}

// kubeFlags are kubectl's connection flags (--kubeconfig, --context, -n, --cluster,
// --user, --as, --request-timeout, ...), with kubectl's meaning: the plugin takes
// what kubectl users type after `kubectl inplace status`.
type kubeFlags struct {
	*genericclioptions.ConfigFlags
}

func newKubeFlags(f *pflag.FlagSet) kubeFlags {
	// usePersistentConfig: one kubeconfig load per command run.
	cf := genericclioptions.NewConfigFlags(true)
	cf.AddFlags(f)
	return kubeFlags{cf}
}

// restConfig is the management cluster's REST config, as kubectl would build it.
func (k kubeFlags) restConfig(userAgent string) (*rest.Config, error) {
	cfg, err := k.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig of the management cluster: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	return cfg, nil
}

// readClient connects to the management cluster the way kubectl does, with a scheme
// of the given API groups, and returns the namespace to look at (namespace).
func (k kubeFlags) readClient(userAgent string, groups ...func(*runtime.Scheme) error) (client.Client, string, error) {
	cfg, err := k.restConfig(userAgent)
	if err != nil {
		return nil, "", err
	}
	namespace, _, err := k.namespace()
	if err != nil {
		return nil, "", err
	}
	scheme := runtime.NewScheme()
	for _, add := range groups {
		if err := add(scheme); err != nil {
			return nil, "", fmt.Errorf("scheme: %w", err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("client for the management cluster: %w", err)
	}
	return c, namespace, nil
}

// namespace is the -n value when given (explicit), else the kubeconfig context's
// namespace, else "default".
func (k kubeFlags) namespace() (ns string, explicit bool, err error) {
	ns, explicit, err = k.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", false, fmt.Errorf("namespace from kubeconfig: %w", err)
	}
	return ns, explicit, nil
}

// LoadPolicy reads the extension's policy file; "" is the built-in policy.
func LoadPolicy(path string) (*policy.Policy, error) {
	if path == "" {
		return policy.Builtin(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy file: %w", err)
	}
	p, err := policy.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return p, nil
}

// NewVersionCommand prints version.
func NewVersionCommand(version string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	}
}

// pluginName is how kubectl users type the plugin (help text and examples).
const pluginName = "kubectl inplace"

// NewPluginCommand is the root command of the kubectl plugin kubectl-inplace:
// `kubectl inplace status|plan|version`. kubectl finds the binary on PATH by its
// name and passes everything after `inplace` to it.
func NewPluginCommand(version string) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-inplace",
		Short: "In-place upgrades for Cluster API clusters: status and plan, as a kubectl plugin",
		Long: `kubectl inplace shows the in-place update progress of Cluster API clusters
(status, and one line per Cluster with fleet status), says, per Machine, whether a
change would go in place or replace it (plan), and checks policy files (policy
validate). It is the same code as capi-inplace status|fleet|plan|policy, with
kubectl's flags.

Exit codes: 0 ok; 1 the command failed; 2 plan: a Machine would be replaced;
3 status: a node's update failed or rolled back (fleet status: a Cluster failed);
4 policy validate: a policy is invalid.`,
		Annotations: map[string]string{
			// Help and usage say "kubectl inplace", as kubectl users type it.
			cobra.CommandDisplayNameAnnotation: pluginName,
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(NewStatusCommand(pluginName), NewFleetCommand(pluginName), NewPlanCommand(pluginName), NewPolicyCommand(pluginName), NewVersionCommand(version))
	return root
}
