package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("status: not implemented yet")
		},
	}
}
