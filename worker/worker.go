// Package worker wires sluice's worker: the Temporal client, the Kubernetes
// client, the registration of the Rollout workflow and its activities, and
// the HTTP endpoints that a platform team probes and scrapes.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/mirror"
	"github.com/sluicehq/sluice/notify"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/templates"
	"github.com/sluicehq/sluice/version"
	"github.com/sluicehq/sluice/workflows"
	"github.com/sluicehq/sluice/workflows/control"
)

// Worker runs rollouts: it polls the task queue and serves health and metrics.
type Worker struct {
	Settings settings.Settings
	Temporal client.Client
	Serving  servingclient.Interface
	// Feed, if set, serves the rollouts' waits on traffic from informers
	// the process already runs (the controller's receiver's).
	Feed knative.Feed
	// Events sends progress events; nil sends none.
	Events *events.Sender
	// Mirror writes Rollout resources and Kubernetes events; nil writes none.
	Mirror *mirror.Writer
	// Notify sends notifications and RunNotify runs it; nil sends none.
	Notify    *notify.Notifier
	RunNotify func(context.Context)
	Log       *slog.Logger
	// Templates reads shared analysis templates; nil refuses targets that
	// name one.
	Templates templates.Source
	// Registry receives sluice's and the SDK's metrics; it must be the one
	// the Temporal client's metrics handler writes to.
	Registry *prometheus.Registry
	// Listening, if set, is told the HTTP address once it is bound.
	Listening func(addr string)
}

// NewRegistry returns a Prometheus registry with the Go and process
// collectors, and a Temporal metrics handler that writes into it.
func NewRegistry(log *slog.Logger, program string) (*prometheus.Registry, client.MetricsHandler) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// sluice_build_info: which build runs here, as kube-state-metrics and
	// Prometheus's own *_build_info do; a dashboard joins on it to show a
	// rolling upgrade's progress.
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_build_info",
		Help: "sluice's build: version, release line and Go version; always 1."}, []string{"program", "version", "line", "goversion"})
	info.WithLabelValues(program, version.Version, version.Line(version.Version), runtime.Version()).Set(1)
	reg.MustRegister(info)
	return reg, newPromMetrics(reg, log)
}

// Register adds the Rollout workflow and the activities to a Temporal worker.
func Register(w sdkworker.Registry, acts *activities.Activities) {
	w.RegisterWorkflowWithOptions(workflows.Rollout, workflow.RegisterOptions{Name: api.RolloutWorkflow})
	w.RegisterActivity(acts)
}

// Run polls for rollouts until ctx is done, then stops gracefully: activities
// in flight get time to finish, and whatever does not is retried by Temporal
// on another worker.
func (w *Worker) Run(ctx context.Context) error {
	sz := w.Settings.Sizing
	opts := sdkworker.Options{
		WorkerStopTimeout:                  10 * time.Second,
		MaxConcurrentWorkflowTaskPollers:   sz.WorkflowPollers,
		MaxConcurrentActivityTaskPollers:   sz.ActivityPollers,
		MaxConcurrentActivityExecutionSize: sz.MaxActivities,
	}
	if w.Settings.WorkflowChanges != settings.ChangesAll {
		// The previous release can be put back under the rollouts this
		// worker starts (docs/operations.md, "Upgrading").
		opts.PreferredVersionProvider = workflows.KeepRollbackOpen
	}
	tw := sdkworker.New(w.Temporal, w.Settings.TaskQueue, opts)
	acts := &activities.Activities{Knative: knative.Client{Serving: w.Serving, Feed: w.Feed}, Defaults: w.Settings.Defaults, Events: w.Events,
		Cluster: w.Settings.Cluster, Temporal: w.Temporal, Mirror: w.Mirror, Notify: w.Notify, Templates: w.Templates}
	if w.Registry != nil && w.Notify != nil {
		w.Notify.Metrics = notify.NewMetrics(w.Registry)
	}
	if w.Registry != nil {
		m := mirror.NewMetrics(w.Registry, w.Mirror)
		acts.TrafficWrites = m.TrafficWrite
		if w.Mirror != nil {
			w.Mirror.Metrics = m
		}
	}
	Register(tw, acts)
	// A cluster's worker also runs wave workflows, on the queue every
	// cluster shares: they only signal and wait, so any cluster serves.
	var ww sdkworker.Worker
	if w.Settings.Cluster != "" {
		ww = sdkworker.New(w.Temporal, api.WaveTaskQueue, sdkworker.Options{WorkerStopTimeout: 10 * time.Second})
		ww.RegisterWorkflowWithOptions(workflows.Wave, workflow.RegisterOptions{Name: api.WaveWorkflow})
		ww.RegisterActivity(acts.EmitProgress) // its progress events, through this cluster's sink
	}

	ln, err := net.Listen("tcp", w.Settings.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for health and metrics on %s: %w", w.Settings.HTTPAddr, err)
	}
	mux := http.NewServeMux()
	HealthRoutes(mux, w.Temporal, w.Registry, w.Settings.Profiling)
	srv := serve(ln, mux, w.Log)
	if w.Listening != nil {
		w.Listening(ln.Addr().String())
	}
	if err := tw.Start(); err != nil {
		_ = srv.Close()
		return fmt.Errorf("start Temporal worker on task queue %s: %w", w.Settings.TaskQueue, err)
	}
	if ww != nil {
		if err := ww.Start(); err != nil {
			tw.Stop()
			_ = srv.Close()
			return fmt.Errorf("start Temporal worker on task queue %s: %w", api.WaveTaskQueue, err)
		}
		defer ww.Stop()
	}
	if w.Mirror != nil {
		ref := &mirror.Refresher{Writer: w.Mirror, Source: rolloutStatus{w.Temporal}, Cluster: w.Settings.Cluster, Log: w.Log,
			Commander: &commander{kube: w.Mirror.Kube, control: &control.Client{Temporal: w.Temporal,
				TaskQueue: w.Settings.TaskQueue, Cluster: w.Settings.Cluster, Identity: "sluice-worker"}}}
		// The mirror outlives the Temporal worker's stop, so the events of
		// the activities finishing then are written too.
		mirrorCtx, stopMirror := context.WithCancel(context.WithoutCancel(ctx))
		mirrorDone := make(chan struct{})
		go func() {
			defer close(mirrorDone)
			w.Mirror.Serve(mirrorCtx, ref.Run)
		}()
		defer func() {
			stopMirror()
			<-mirrorDone
		}()
	}
	if w.RunNotify != nil {
		go w.RunNotify(ctx)
	}
	w.Log.Info("worker started", "taskQueue", w.Settings.TaskQueue, "cluster", w.Settings.Cluster, "http", ln.Addr().String())
	<-ctx.Done()
	w.Log.Info("worker stopping")
	tw.Stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// HealthRoutes adds /healthz (the process is up), /readyz (Temporal is
// reachable) and /metrics to mux, and with profiling Go's runtime profiles
// under /debug/pprof/.
func HealthRoutes(mux *http.ServeMux, temporal client.Client, reg *prometheus.Registry, profiling bool) {
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.WriteHeader(http.StatusOK)
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if _, err := temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			http.Error(rw, "Temporal unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if profiling {
		// Registered here rather than by importing net/http/pprof for its
		// side effect, which would serve them on http.DefaultServeMux.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
}

func serve(ln net.Listener, h http.Handler, log *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "addr", ln.Addr().String(), "error", err)
		}
	}()
	return srv
}

// ServeUntilDone serves h on ln until ctx is done, then shuts down gracefully.
func ServeUntilDone(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := serve(ln, h, log)
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
