package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newExtensionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "extension",
		Short: "Not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("extension: not implemented yet")
		},
	}
}
