// Command capi-inplace is the Cluster API update extension and the operator CLI
// (status, plan). The node agent is its own binary and image
// (cmd/capi-inplace-agent); the demo and the simulated agent are the test harness
// binary's (test/cmd/capi-inplace-dev), so that neither the agent nor the
// extension links test code (test/productdeps).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	if err := newRootCommand().ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 1 for any error, unless a subcommand documents its own code for it
// (status: 3 when a node failed) by returning an error with an ExitCode method.
func exitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return 1
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
		newStatusCommand(),
		newPlanCommand(),
		newVersionCommand(),
	)
	return root
}
