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
		Long: `Run the local stack — real etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
kwok's fake node, Knative Serving's own controller, webhook and autoscaler, the Temporal dev
server and UI, Knative Eventing's ApiServerSource adapter, Prometheus, a sluice worker and
receiver; only the ingress's status and the data plane's metrics are simulated — and show a
rollout: a new Revision stops at a manual gate until you promote it, then a failing Revision
is rolled back. The stack runs Knative's components in network namespaces: it needs root.

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
