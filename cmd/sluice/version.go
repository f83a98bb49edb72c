package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=...".
var version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print sluice's version and the versions it was built with",
		Example: "  sluice version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "sluice %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if info, ok := debug.ReadBuildInfo(); ok {
				for _, dep := range info.Deps {
					switch dep.Path {
					case "go.temporal.io/sdk", "knative.dev/serving", "github.com/cloudevents/sdk-go/v2", "k8s.io/client-go":
						fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", dep.Path, dep.Version)
					}
				}
			}
			return nil
		},
	}
}
