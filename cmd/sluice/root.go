package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

// globals are the flags every verb shares.
type globals struct {
	namespace string
	address   string
	temporalN string
	taskQueue string
	cluster   string
	as        string
	output    string
	uiURL     string
}

func newRootCommand() *cobra.Command {
	return newRoot(strings.HasPrefix(filepath.Base(os.Args[0]), "kn-"))
}

// newRoot builds the command tree; kn: installed as the kn plugin kn-sluice,
// run as `kn sluice promote hello`.
func newRoot(kn bool) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Durable progressive rollouts for Knative Serving, on Temporal",
		Long: `sluice rolls new Knative Revisions out step by step — traffic weights, holds,
manual gates, deadlines, automatic rollback — as durable Temporal workflows.

Targets are Knative Services (NAME or service/NAME) or Configurations rolled out
on a Route (configuration/NAME). Temporal is found through TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE and the Temporal config file, or the flags below.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.namespace, "namespace", "n", "", "Kubernetes namespace of the target (default: the kube context's namespace, else default)")
	pf.StringVar(&g.address, "address", "", "Temporal frontend host:port (default: TEMPORAL_ADDRESS or localhost:7233)")
	pf.StringVar(&g.temporalN, "temporal-namespace", "", "Temporal namespace (default: TEMPORAL_NAMESPACE or default)")
	pf.StringVar(&g.taskQueue, "task-queue", os.Getenv(settings.EnvTaskQueue), "Temporal task queue of the sluice workers (SLUICE_TASK_QUEUE; default "+api.DefaultTaskQueue+", or "+api.DefaultTaskQueue+"-CLUSTER with --cluster)")
	pf.StringVar(&g.cluster, "cluster", os.Getenv(settings.EnvCluster), "the cluster of the target, when several clusters share the Temporal namespace (SLUICE_CLUSTER)")
	pf.StringVar(&g.as, "as", defaultIdentity(), "who you are, recorded with every command")
	pf.StringVarP(&g.output, "output", "o", "text", "output format of read verbs: text, json or yaml")
	pf.StringVar(&g.uiURL, "ui-url", envOr("SLUICE_TEMPORAL_UI", "http://localhost:8233"), "the Temporal UI's address, for links (SLUICE_TEMPORAL_UI)")

	root.AddCommand(
		newWorkerCommand(),
		newReceiverCommand(),
		newControllerCommand(),
		newStartCommand(g),
		newStatusCommand(g),
		newPromoteCommand(g),
		newSimpleCommand(g, "pause", "Pause a rollout before its next step; the hold keeps its remaining time", "pause"),
		newSimpleCommand(g, "resume", "Resume a paused rollout", "resume"),
		newAbortCommand(g),
		newUndoCommand(g),
		newSimpleCommand(g, "reload-analysis", "Read the rollout's analysis template again: from its next round it judges by the template as it is now", api.CommandReloadAnalysis),
		newSetupCommand(g),
		newListCommand(g),
		newHistoryCommand(g),
		newReportCommand(g),
		newWaveCommand(g),
		newRetryCommand(g),
		newLintCommand(g),
		newVersionCommand(g),
	)
	applyHabits(root, g, kn)
	return root
}

// kubeNamespace is -n, else the namespace of the kube context (as kubectl
// and kn choose it).
func (g *globals) kubeNamespace(kubeconfig string) string {
	if g.namespace != "" {
		return g.namespace
	}
	return worker.ContextNamespace(kubeconfig)
}

// dial connects to Temporal for a CLI verb.
func (g *globals) dial(ctx context.Context) (*control.Client, func(), error) {
	if g.cluster != "" {
		if err := config.ValidateCluster(g.cluster); err != nil {
			return nil, nil, fmt.Errorf("--cluster: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts, err := worker.TemporalOptions(log, nil)
	if err != nil {
		return nil, nil, err
	}
	if g.address != "" {
		opts.HostPort = g.address
	}
	if g.temporalN != "" {
		opts.Namespace = g.temporalN
	}
	opts.Identity = g.as
	c, err := worker.DialTemporal(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	tq := g.taskQueue
	if tq == "" {
		tq = api.ClusterTaskQueue(g.cluster)
	}
	return &control.Client{Temporal: c, TaskQueue: tq, Cluster: g.cluster, Identity: g.as}, c.Close, nil
}

func defaultIdentity() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	if host == "" {
		return name
	}
	return name + "@" + host
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
