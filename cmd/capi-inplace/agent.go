package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newAgentCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "Not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent: not implemented yet")
		},
	}
}
