// Package stack runs sluice's local stack on this machine: real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler; kwok's fake
// node, on which pods are scheduled for real and played through their
// lifecycle; Knative Serving's own webhook, controller and autoscaler, built
// unmodified and configured from Knative's own config/core; the Temporal
// dev server (with its UI); Knative Eventing's real ApiServerSource adapter;
// and sluice's worker and receiver as processes of the sluice binary. Only
// what lies below Knative is simulated, by small test doubles: the
// networking layer's KIngress status (test/ingress), and in the data plane
// the ingress's choice of Revision and the user containers
// (test/requestsim), plus queue-proxy stats for pods that run no real
// queue-proxy (see queueProxies). Knative's components run in network namespaces on a
// bridge (see Bridge), which needs root. The e2e tests, the benchmark and
// test/cmd/sluice-dev (make demo) use it.
package stack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/test/ingress"
	"github.com/sluicehq/sluice/test/requestsim"
)

// Tools are the binaries the stack runs; test/tools/install.sh builds them.
type Tools struct {
	Temporal string // the Temporal CLI
	KubeDir  string // kube-apiserver and kubectl
	EtcdDir  string // etcd
	Adapter  string // Knative Eventing's apiserver_receive_adapter
	Sluice   string // the sluice binary
	// ServingDir holds Knative Serving's controller, webhook and autoscaler.
	ServingDir string
	// KwokDir holds kwok.
	KwokDir string
	// Prometheus is the Prometheus server (with Kubernetes discovery), needed
	// with Options.Prometheus.
	Prometheus string
	// TemporalServerDir holds Temporal's server and its SQL tool, and
	// PostgresDir PostgreSQL's programs: needed with Options.TemporalCluster;
	// TemporalUIServer is Temporal's web UI server, its UI (optional).
	TemporalServerDir, PostgresDir, TemporalUIServer string
}

// ToolsFromEnv reads the tool locations that `test/tools/install.sh all` prints.
func ToolsFromEnv() (Tools, error) {
	t := Tools{
		Temporal:   os.Getenv("SLUICE_TEMPORAL_BIN"),
		KubeDir:    os.Getenv("SLUICE_KUBE_DIR"),
		EtcdDir:    os.Getenv("SLUICE_ETCD_DIR"),
		Sluice:     os.Getenv("SLUICE_BIN"),
		Prometheus: os.Getenv("SLUICE_PROMETHEUS_BIN"),
		ServingDir: os.Getenv("SLUICE_SERVING_DIR"),
		KwokDir:    os.Getenv("SLUICE_KWOK_DIR"),

		TemporalServerDir: os.Getenv("SLUICE_TEMPORAL_SERVER_DIR"),
		PostgresDir:       os.Getenv("SLUICE_POSTGRES_DIR"),
		TemporalUIServer:  os.Getenv("SLUICE_TEMPORAL_UI_SERVER"),
	}
	if d := os.Getenv("SLUICE_EVENTING_DIR"); d != "" {
		t.Adapter = filepath.Join(d, "apiserver_receive_adapter")
	}
	var missing []string
	for _, v := range []struct{ name, value string }{
		{"SLUICE_TEMPORAL_BIN", t.Temporal}, {"SLUICE_KUBE_DIR", t.KubeDir}, {"SLUICE_ETCD_DIR", t.EtcdDir},
		{"SLUICE_EVENTING_DIR", t.Adapter}, {"SLUICE_BIN", t.Sluice},
		{"SLUICE_SERVING_DIR", t.ServingDir}, {"SLUICE_KWOK_DIR", t.KwokDir},
	} {
		if v.value == "" {
			missing = append(missing, v.name)
		}
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("the local stack needs %s: run it through `make test` or `make demo`, which build the tools and set them", strings.Join(missing, ", "))
	}
	return t, nil
}

// Options shape a stack.
type Options struct {
	// Dir holds data and logs; it must exist.
	Dir   string
	Tools Tools
	// Root is the repository's root: Knative's and kwok's YAML are read
	// from the modules its tools modules require.
	Root string
	// CRDDirs hold Knative's CRD YAML (Serving's config/core/300-resources,
	// Eventing's config/core/resources).
	CRDDirs []string
	// ControlPlaneOnly starts etcd and kube-apiserver with the CRDs, and
	// nothing else: for tests that run Knative's own components beside it.
	ControlPlaneOnly bool
	// ServingStandIn runs, instead of Knative Serving's controller, webhook
	// and autoscaler and everything beneath them (kube's controllers, kwok,
	// the data plane, the ingress), the stand-in of test/servingstandin,
	// which makes every Revision Ready at once and has status follow spec:
	// for the fleet run, which measures sluice and Temporal at thousands of
	// Services that Knative's own controller could not carry here.
	ServingStandIn bool
	// NoSluice starts everything but sluice: no manifests applied, no
	// worker, receiver or ApiServerSource adapter. For tests that install
	// sluice themselves (Spawn, StartAdapter, ServiceAccountKubeconfig).
	NoSluice bool
	// APIServerAddress is the address kube-apiserver serves on (default
	// 127.0.0.1): a Bridge's Host, for components in network namespaces.
	APIServerAddress string
	// AggregatorRouting makes the API server call webhooks at their
	// Services' endpoints rather than their cluster IPs.
	AggregatorRouting bool
	// DeployDir, if set, is config/deploy: it is applied, and the worker and
	// receiver then run with their own ServiceAccounts' tokens — exactly the
	// rights the manifests give them — instead of the administrator's.
	DeployDir string
	// Adapter runs the ApiServerSource adapter, in a network namespace of its own.
	Adapter bool
	// ProgressSink is K_SINK for the worker's progress events.
	ProgressSink string
	// TemporalPort and UIPort fix the dev server's ports; 0 picks free ones,
	// and UIPort 0 runs headless unless UI is set.
	TemporalPort, UIPort int
	UI                   bool
	// TemporalInMemory keeps the dev server's SQLite database in memory
	// instead of a file in Dir: no restart survives it, and no write waits
	// for a disk. The benchmark uses it, to measure sluice rather than this
	// machine's disk.
	TemporalInMemory bool
	// TemporalCluster runs Temporal's production topology instead of the
	// dev server: the frontend, history, matching and worker services as
	// processes of their own on PostgreSQL, with several history shards
	// and SQL advanced visibility (temporalcluster.go); its web UI is
	// Temporal's UI server as a process of its own (with UI or UIPort, and
	// Tools.TemporalUIServer).
	// SLUICE_TEMPORAL=cluster in the environment turns it on for every
	// stack, so a whole test package, `make chaos` or `make bench` runs on it.
	TemporalCluster bool
	// NoEagerActivities runs Temporal at its own default, which returns no
	// activity task in the answer to the workflow task that scheduled it.
	// By default the stack's Temporal turns eager activities on, as
	// docs/operations.md recommends for sluice: a step's write then starts
	// without a round trip through matching. SLUICE_TEMPORAL_EAGER=false in
	// the environment sets it for every stack, to measure the difference.
	NoEagerActivities bool
	// Controller runs sluice as one `sluice controller` process in place of
	// the worker and the receiver, as the worker's ServiceAccount with the
	// receiver's roles bound to it too (controller.go). The stack's worker
	// and receiver are then that one process: killing either kills it.
	// SLUICE_STACK_CONTROLLER=true in the environment turns it on for every
	// stack.
	Controller bool
	// WorkerEnv is extra environment for the worker, e.g. SLUICE_DEFAULT_HOLD;
	// ReceiverEnv for the receiver, e.g. SLUICE_RECEIVER_SWEEP.
	WorkerEnv, ReceiverEnv []string
	// Temporal, if set, is a Temporal frontend already running (another
	// stack's TemporalAddr): this stack starts no dev server of its own, and
	// its sluice shares that one, as clusters sharing a Temporal namespace do.
	Temporal string
	// Cluster names this stack's cluster to its worker and receiver
	// (SLUICE_CLUSTER); empty for a stack alone on its Temporal.
	Cluster string
	// Audit turns on the API server's audit log (AuditLog) for Knative's
	// kinds: traffic patches with their bodies, other requests without.
	Audit bool
	// AuditBlocking writes each audit event before the API server answers
	// the request, so a killed API server loses none of them (the default,
	// batch, is cheaper and what the benchmark measures with).
	AuditBlocking bool
	// AuditPods also records Revisions as created and Deployments' status
	// writes (podsAuditRules), for checks of pod counts.
	AuditPods bool
	// AuditTrafficOnly records the traffic writes and nothing else: what
	// the e2e scenarios read, at a fraction of the full log's cost to the
	// API server, which otherwise records every read of Knative's kinds.
	AuditTrafficOnly bool
	// Via, if set, gives the address sluice's worker and receiver reach a
	// server through: for "kube-apiserver" and "temporal" it is given and
	// returns host:port, for "events" (the ApiServerSource adapter's sink)
	// the receiver's URL. A fault-injecting proxy's, for chaos runs.
	Via func(name, addr string) (string, error)
	// Prometheus runs a real Prometheus server scraping the real
	// queue-proxies (ScrapeConfig); the worker's SLUICE_PROMETHEUS_URL
	// points at it.
	Prometheus bool
	// OnReady is told when a Revision is first seen Ready.
	OnReady func(revision string, at time.Time)
	Log     *slog.Logger
}

// Stack is a running local stack.
type Stack struct {
	opts Options

	etcd, apiserver, temporal, worker, receiver, adapter, prometheus *proc
	// cluster is the production-shaped Temporal, with Options.TemporalCluster.
	cluster                            *temporalCluster
	controllerManager, scheduler, kwok *proc

	// bridge holds Knative's network namespaces.
	bridge *Bridge
	// knativeWebhook is Knative's webhook, and how to start it again.
	knativeWebhook *proc
	restartWebhook func(context.Context) error
	// Ingress is the networking layer's stand-in (Pause stops it for a Route).
	Ingress *ingress.Controller
	// background are the stack's in-process loops (the ingress stand-in,
	// the data plane, the readiness watch): cancel, then wait for done.
	background []func()

	etcdURL string
	// KubeURL and Kubeconfig reach the API server as its administrator.
	KubeURL, Kubeconfig string
	Rest                *rest.Config
	Serving             servingclient.Interface
	// TemporalAddr is the dev server's frontend; UIURL its web UI, if any.
	TemporalAddr, UIURL string
	// ReceiverURL takes CloudEvents; ReceiverToken authenticates commands.
	ReceiverURL, ReceiverToken string
	// WorkerHTTP serves the worker's /healthz and /metrics.
	WorkerHTTP string
	// RouterURL takes requests as the ingress would (ingress.Router): send
	// them with the Host of a Route's or a tag's URL.
	RouterURL string
	// PrometheusURL is the Prometheus server's HTTP API, with Options.Prometheus.
	PrometheusURL string
	// AuditLog is the API server's audit log (JSON lines), with Options.Audit.
	AuditLog string
	// workerKubeconfig and receiverKubeconfig are what those processes use;
	// sluiceTemporal is their Temporal address (TemporalAddr, or Via's).
	workerKubeconfig, receiverKubeconfig string
	sluiceTemporal                       string
	// admissionPort is where the receiver serves its admission webhook
	// (with DeployDir, whose webhook configuration the stack points at it).
	admissionPort int

	// queueProxies are the data plane's real queue-proxies; sim its requests.
	queueProxies *queueProxies
	sim          *requestsim.Sim
	stats        *requestsim.Stats
	// extra are processes started with Run, stopped first.
	extra []*proc
}

// Run starts another process beside the stack (its log is name.log in
// Dir), stopped with the stack before the API server. It fails if the
// process exits within ready's first check, or ready never passes.
func (s *Stack) Run(ctx context.Context, name string, env []string, ready func() error, bin string, args ...string) error {
	_, err := s.run(ctx, name, env, ready, bin, args...)
	return err
}

func (s *Stack) run(ctx context.Context, name string, env []string, ready func() error, bin string, args ...string) (*proc, error) {
	p, err := startProc(s.opts.Dir, name, env, bin, args...)
	if err != nil {
		return nil, err
	}
	s.extra = append(s.extra, p)
	return p, waitFor(ctx, p, name, 60*time.Second, ready)
}

// Spawn starts a process beside the stack as Run does, and returns a stop
// that sends it SIGTERM and waits up to grace before SIGKILL (it also stops
// with the stack).
func (s *Stack) Spawn(ctx context.Context, name string, env []string, ready func() error, bin string, args ...string) (stop func(grace time.Duration), err error) {
	p, err := s.run(ctx, name, env, ready, bin, args...)
	if p == nil {
		return nil, err
	}
	return p.stop, err
}

// HTTPReady is a readiness check: GET url answers 200.
func HTTPReady(url string) func() error { return httpOK(url) }

// Namespace is where the stack's Knative objects live.
const Namespace = "default"

// Start brings the stack up, in dependency order; on error, what started is stopped.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if os.Getenv("SLUICE_TEMPORAL") == "cluster" {
		o.TemporalCluster = true
	}
	if os.Getenv("SLUICE_STACK_CONTROLLER") == "true" {
		o.Controller = true
	}
	if os.Getenv("SLUICE_TEMPORAL_EAGER") == "false" {
		o.NoEagerActivities = true
	}
	s := &Stack{opts: o}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	type step struct {
		name string
		fn   func(context.Context) error
	}
	steps := []step{
		{"etcd", s.startEtcd},
		{"kube-apiserver", s.startAPIServer},
		{"Knative CRDs", s.applyCRDs},
	}
	// What plays Knative Serving: the stand-in, or Knative's own components
	// with what lies beneath them; then Temporal and sluice.
	var serving []step
	switch {
	case o.ServingStandIn:
		serving = []step{{"Knative Serving stand-in", s.startServingStandIn}}
	case !o.ControlPlaneOnly:
		steps = append([]step{{"network namespaces", s.startBridge}}, steps...)
		serving = []step{
			{"kube-controller-manager", s.startControllerManager},
			{"kube-scheduler", s.startScheduler},
			{"kwok", s.startKwok},
			{"Knative webhook", s.startKnativeWebhook},
			{"Knative controller", s.startKnativeController},
			{"data plane stand-in", s.startDataPlane},
			{"Knative autoscaler", s.startKnativeAutoscaler},
			{"KIngress stand-in", s.startIngress},
		}
	}
	if serving != nil {
		steps = append(steps, serving...)
		if !o.NoSluice {
			steps = append(steps, step{"sluice's manifests", s.applyDeploy})
		}
		steps = append(steps, step{"Temporal", s.startTemporal}, step{"Prometheus", s.startPrometheus})
		if !o.NoSluice {
			steps = append(steps, step{"sluice worker", s.StartWorker}, step{"sluice receiver", s.StartReceiver})
		}
		if o.Adapter && !o.NoSluice {
			steps = append(steps, step{"ApiServerSource adapter", s.startAdapter})
		}
	}
	up := time.Now()
	for _, st := range steps {
		begin := time.Now()
		if err := st.fn(ctx); err != nil {
			return nil, fmt.Errorf("start %s: %w", st.name, err)
		}
		o.Log.Info("stack: started", "component", st.name, "took", time.Since(begin).Round(time.Millisecond))
	}
	o.Log.Info("stack: up", "took", time.Since(up).Round(time.Millisecond))
	return s, nil
}

// Stop shuts everything down, dependents first: sluice, Knative, kwok and
// the controllers, then the servers; etcd last (stopping it first hangs
// the rest).
func (s *Stack) Stop() {
	for _, p := range []*proc{s.adapter, s.receiver, s.worker, s.prometheus} {
		p.stop(10 * time.Second)
	}
	for i := len(s.extra) - 1; i >= 0; i-- {
		s.extra[i].stop(10 * time.Second)
	}
	for i := len(s.background) - 1; i >= 0; i-- {
		s.background[i]()
	}
	for _, p := range []*proc{s.kwok, s.scheduler, s.controllerManager, s.temporal} {
		p.stop(10 * time.Second)
	}
	s.cluster.stop()
	for _, p := range []*proc{s.apiserver, s.etcd} {
		p.stop(10 * time.Second)
	}
	if s.bridge != nil {
		s.bridge.Close()
	}
}
