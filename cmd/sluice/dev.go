package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/test/demo"
	"github.com/sluicehq/sluice/test/stack"
)

func newDevCommand() *cobra.Command {
	var unattended bool
	var temporalPort, uiPort int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the local demo stack and walk through a rollout (what `make demo` runs)",
		Long: `Run the local stack — real etcd and kube-apiserver with Knative's CRDs, the Temporal dev
server and UI, Knative Eventing's ApiServerSource adapter, a sluice worker and receiver, and a
simulator standing in for Knative Serving's controllers — and show a rollout: a new Revision
stops at a manual gate until you promote it, then a failing Revision is rolled back.

Run it from a clone of sluice through ` + "`make demo`" + `, which builds the tools it needs.
With --unattended (or SLUICE_DEMO_UNATTENDED=1) it promotes by itself and exits 0 only if
every expected outcome was observed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv("SLUICE_DEMO_UNATTENDED") == "1" {
				unattended = true
			}
			tools, err := stack.ToolsFromEnv()
			if err != nil {
				return err
			}
			root, err := stack.RepoRoot(".")
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "sluice-demo-")
			if err != nil {
				return err
			}
			err = demo.Run(cmd.Context(), demo.Options{
				Unattended: unattended, Dir: dir, Tools: tools, Root: root,
				TemporalPort: temporalPort, UIPort: uiPort, Out: cmd.OutOrStdout(),
			})
			if err == nil || cmd.Context().Err() != nil {
				os.RemoveAll(dir)
				return nil
			}
			return fmt.Errorf("%w\n(the stack's logs are in %s)", err, dir)
		},
	}
	cmd.Flags().BoolVar(&unattended, "unattended", false, "promote without waiting for a person, check every outcome, exit")
	cmd.Flags().IntVar(&temporalPort, "temporal-port", 7233, "Temporal dev server port")
	cmd.Flags().IntVar(&uiPort, "ui-port", 8233, "Temporal UI port")
	return cmd
}
