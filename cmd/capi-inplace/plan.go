package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newPlanCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "plan",
		Short: "Not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("plan: not implemented yet")
		},
	}
}
