//go:build !dev

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// devCommand, in a build without -tags dev, only says how to get the
// developer tools (dev.go): they are left out of the default binary.
func devCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "dev",
		Short:              "Developer tools (fake LLM server, …): build with -tags dev",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("the developer tools are not in this build: run them with `go run -tags dev ./cmd/agentbox dev fake-llm …` or build with -tags dev")
		},
	}
}
