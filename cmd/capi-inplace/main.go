// Command capi-inplace is the Cluster API update extension and the operator CLI
// (status, plan; internal/cli, shared with the kubectl plugin cmd/kubectl-inplace). The node agent is its own binary and image
// (cmd/capi-inplace-agent); the demo and the simulated agent are the test harness
// binary's (test/cmd/capi-inplace-dev), so that neither the agent nor the
// extension links test code (test/productdeps).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capi-inplace/capi-inplace/internal/cli"
)

func main() {
	if err := newRootCommand().ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		// 1 for any error; plan's 2 (a Machine would be replaced) and status's 3 (a
		// node failed) as internal/cli documents them (docs/cli.md).
		os.Exit(cli.ExitCode(err))
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "capi-inplace",
		Short: "In-place upgrades for Cluster API clusters: no new machines",
		Long: `capi-inplace upgrades the nodes of Cluster API clusters where they stand:
Kubernetes version, kubeadm configuration and OS image, for control-plane and
worker nodes, with drain, health gates and automatic rollback.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newExtensionCommand(),
		cli.NewStatusCommand("capi-inplace"),
		cli.NewFleetCommand("capi-inplace"),
		cli.NewPlanCommand("capi-inplace"),
		cli.NewPolicyCommand("capi-inplace"),
		cli.NewVersionCommand(version),
	)
	return root
}
