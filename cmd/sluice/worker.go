package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/worker"
)

func newWorkerCommand() *cobra.Command {
	var httpAddr, kubeconfig string
	cmd := &cobra.Command{
		Use:     "worker",
		Short:   "Run rollouts: poll Temporal for Rollout workflows and their activities",
		Example: "  TEMPORAL_ADDRESS=127.0.0.1:7233 sluice worker\n  SLUICE_CLUSTER=east SLUICE_DEFAULT_HOLD=5m sluice worker",
		Long: `Run a sluice worker. Run as many as you like against one Temporal cluster:
Temporal spreads the rollouts over them, and a rollout survives any of them dying.

Settings come from the environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
TEMPORAL_API_KEY, TEMPORAL_TLS* (Temporal's conventions); SLUICE_CLUSTER (when
several clusters share the Temporal namespace: this worker's cluster), SLUICE_TASK_QUEUE,
SLUICE_HTTP_ADDR (health and metrics, default :9090), KUBECONFIG, and the policy
defaults SLUICE_DEFAULT_STEPS, SLUICE_DEFAULT_HOLD, SLUICE_DEFAULT_PROGRESS_DEADLINE,
SLUICE_DEFAULT_VERIFY_TIMEOUT, SLUICE_DEFAULT_DEADLINE; the worker's size
SLUICE_WORKFLOW_POLLERS, SLUICE_ACTIVITY_POLLERS, SLUICE_MAX_ACTIVITIES and its Kubernetes
API rate SLUICE_KUBE_QPS, SLUICE_KUBE_BURST (docs/operations.md); SLUICE_WORKFLOW_CHANGES=all
lets new rollouts take the workflow changes the previous release cannot replay (default
compatible: a rollback of the workers stays safe); SLUICE_PPROF=true serves Go's profiles
at /debug/pprof/ on SLUICE_HTTP_ADDR; SLUICE_TEMPORAL_COMPRESSION=gzip compresses its gRPC
requests to Temporal (default none). Progress events go to K_SINK, with
K_CE_OVERRIDES applied (the SinkBinding convention); without K_SINK none are sent.
Where the cluster serves rollouts.sluice.dev, each target's Rollout resource
shows its rollout (SLUICE_ROLLOUT_RESOURCES=off turns them off; they are
written at SLUICE_ROLLOUT_RESOURCES_RATE writes a second at most, default 10),
linking to the Temporal UI at SLUICE_TEMPORAL_UI.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			settings, err := workerSettings(cmd, httpAddr, kubeconfig)
			if err != nil {
				return err
			}
			sc, err := connectServer(cmd, log, "worker", settings.Kubeconfig)
			if err != nil {
				return err
			}
			defer sc.temporal.Close()
			w, err := newWorker(cmd, log, sc, settings)
			if err != nil {
				return err
			}
			return w.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http-addr", "", "address for /healthz, /readyz and /metrics (default SLUICE_HTTP_ADDR or :9090)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default KUBECONFIG, in-cluster, then ~/.kube/config)")
	return cmd
}

// workerSettings are the worker's settings from the environment, with
// --http-addr, --kubeconfig, --cluster and --task-queue over them.
func workerSettings(cmd *cobra.Command, httpAddr, kubeconfig string) (settings.Settings, error) {
	s, err := settings.LoadSettings(os.LookupEnv)
	if err != nil {
		return s, err
	}
	if httpAddr != "" {
		s.HTTPAddr = httpAddr
	}
	if kubeconfig != "" {
		s.Kubeconfig = kubeconfig
	}
	return s, clusterFlags(cmd, &s.Cluster, &s.TaskQueue)
}

// newWorker builds the worker on sc: its progress-event sender, Rollout
// resources, notifications and analysis templates.
func newWorker(cmd *cobra.Command, log *slog.Logger, sc *serverClients, settings settings.Settings) (*worker.Worker, error) {
	sender, err := events.NewSender(os.Getenv("K_SINK"), os.Getenv("K_CE_OVERRIDES"), nil)
	if err != nil {
		return nil, err
	}
	mirror, err := worker.NewMirror(sc.kube, sc.namespace, log)
	if err != nil {
		return nil, err
	}
	notifier, runNotify, err := worker.NewNotifier(sc.kube, sc.namespace, log)
	if err != nil {
		return nil, err
	}
	tmpl, err := worker.NewTemplates(sc.kube)
	if err != nil {
		return nil, err
	}
	return &worker.Worker{Settings: settings, Temporal: sc.temporal, Serving: sc.serving, Events: sender, Mirror: mirror,
		Notify: notifier, RunNotify: runNotify, Log: log, Registry: sc.reg, Templates: tmpl,
		Listening: func(addr string) { fmt.Fprintf(cmd.ErrOrStderr(), "health and metrics on http://%s\n", addr) }}, nil
}

// clusterFlags applies --cluster and --task-queue over what the environment
// set: a cluster named on the command line brings its own default task
// queue, unless a task queue is named too.
func clusterFlags(cmd *cobra.Command, cluster, taskQueue *string) error {
	if f := cmd.Flag("cluster"); f != nil && f.Changed {
		if err := config.ValidateCluster(f.Value.String()); err != nil {
			return fmt.Errorf("--cluster: %w", err)
		}
		*cluster = f.Value.String()
		if os.Getenv(settings.EnvTaskQueue) == "" {
			*taskQueue = api.ClusterTaskQueue(*cluster)
		}
	}
	if f := cmd.Flag("task-queue"); f != nil && f.Changed {
		*taskQueue = f.Value.String()
	}
	return nil
}
