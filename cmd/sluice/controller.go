package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

func newControllerCommand() *cobra.Command {
	var httpAddr, listen, kubeconfig string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the worker and the receiver in one process",
		Example: "  sluice controller\n" +
			"  sluice controller --listen :8081 --http-addr :9090",
		Long: `Run a sluice worker and the CloudEvents receiver in one process, sharing one
Temporal connection, one Kubernetes client and one metrics registry: what the two
commands do, on less memory than the two processes (docs/operations.md).

The worker's waits on a Service's or Route's traffic follow the receiver's
informers instead of each opening a watch on the API server, for the namespaces
the receiver serves (SLUICE_RECEIVER_NAMESPACES, default all).

Settings are those of "sluice worker" and "sluice receiver". The receiver answers on
--listen (SLUICE_RECEIVER_ADDR, default :8081), the worker's health and metrics on
--http-addr (SLUICE_HTTP_ADDR, default :9090); both serve /healthz, /readyz and the
same /metrics. Run as many as you like: each replica takes rollouts and events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			ws, err := workerSettings(cmd, httpAddr, kubeconfig)
			if err != nil {
				return err
			}
			rs, err := receiverSettings(cmd, listen)
			if err != nil {
				return err
			}
			rs.Kubeconfig = ws.Kubeconfig
			sc, err := connectServer(cmd, log, "controller", ws.Kubeconfig)
			if err != nil {
				return err
			}
			defer sc.temporal.Close()
			serve, targets, err := startReceiver(cmd, log, sc, rs)
			if err != nil {
				return err
			}
			w, err := newWorker(cmd, log, sc, ws)
			if err != nil {
				return err
			}
			w.Feed = targets
			// Either half failing stops the other: a controller that only
			// half works would look healthy to its probes.
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			served := make(chan error, 1)
			go func() {
				served <- serve(ctx)
				stop()
			}()
			err = w.Run(ctx)
			stop()
			if serr := <-served; err == nil {
				err = serr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http-addr", "", "address for the worker's /healthz, /readyz and /metrics (default SLUICE_HTTP_ADDR or :9090)")
	cmd.Flags().StringVar(&listen, "listen", "", "address to receive CloudEvents on (default SLUICE_RECEIVER_ADDR or :8081)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default KUBECONFIG, in-cluster, then ~/.kube/config)")
	return cmd
}
