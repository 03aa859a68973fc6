package main

import (
	"github.com/spf13/cobra"

	"github.com/capi-inplace/capi-inplace/internal/agent/agentcmd"
)

// newAgentCommand is the node agent as in capi-inplace-agent, hidden: nodes run the
// capi-inplace-agent image. It stays while the real-node lane (make e2e-node)
// builds its agent image from this binary; drop it once the lane ships
// capi-inplace-agent (the DaemonSet's arguments work with both).
func newAgentCommand() *cobra.Command {
	cmd := agentcmd.NewCommand("agent", version, nil)
	cmd.Hidden = true
	return cmd
}
