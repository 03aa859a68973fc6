package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDemoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("demo: not implemented yet")
		},
	}
}
