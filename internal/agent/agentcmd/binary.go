package agentcmd

import (
	"fmt"

	"github.com/spf13/cobra"
)

// NewBinaryCommand is the command tree of the capi-inplace-agent binary: the agent
// at its root, the same agent as its `agent` subcommand, and `version`. The
// `agent` subcommand is what the DaemonSet runs (["agent", "--host-root=/host"],
// agentinstall.Config), so an extension and an agent image of different releases
// agree on the arguments during an upgrade. The docs' flag reference is generated
// from this tree (cmd/capi-inplace's docs tests).
func NewBinaryCommand(version string) *cobra.Command {
	root := NewCommand("capi-inplace-agent", version, nil)
	root.AddCommand(NewCommand("agent", version, nil), newRescueCommand(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	})
	return root
}
