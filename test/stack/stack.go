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
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

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
	// Adapter runs the ApiServerSource adapter (it binds port 8080: one per machine).
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
	controllerManager, scheduler, kwok                               *proc

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

// Kube is a Kubernetes client of the stack's API server, as its administrator.
func (s *Stack) Kube() kubernetes.Interface { return kubernetes.NewForConfigOrDie(s.Rest) }

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

// Namespace is where the stack's Knative objects live.
const Namespace = "default"

// Start brings the stack up, in dependency order; on error, what started is stopped.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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
	if !o.ControlPlaneOnly {
		steps = append([]step{{"network namespaces", s.startBridge}}, steps...)
		steps = append(steps, []step{
			{"kube-controller-manager", s.startControllerManager},
			{"kube-scheduler", s.startScheduler},
			{"kwok", s.startKwok},
			{"Knative webhook", s.startKnativeWebhook},
			{"Knative controller", s.startKnativeController},
			{"data plane stand-in", s.startDataPlane},
			{"Knative autoscaler", s.startKnativeAutoscaler},
			{"KIngress stand-in", s.startIngress},
			{"sluice's manifests", s.applyDeploy},
			{"Temporal dev server", s.startTemporal},
			{"Prometheus", s.startPrometheus},
			{"sluice worker", s.StartWorker},
			{"sluice receiver", s.StartReceiver},
		}...)
		if o.Adapter {
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

func (s *Stack) startEtcd(ctx context.Context) error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	cu := fmt.Sprintf("http://127.0.0.1:%d", client)
	pu := fmt.Sprintf("http://127.0.0.1:%d", peer)
	s.etcd, err = startProc(s.opts.Dir, "etcd", nil, filepath.Join(s.opts.Tools.EtcdDir, "etcd"),
		"--data-dir", filepath.Join(s.opts.Dir, "etcd"), "--name", "stack",
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu, "--initial-cluster", "stack="+pu,
		"--log-level", "warn", "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	s.etcdURL = cu
	return waitFor(ctx, s.etcd, "etcd", 30*time.Second, func() error {
		resp, err := http.Get(cu + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
}

func (s *Stack) startAPIServer(ctx context.Context) error {
	dir := s.opts.Dir
	port, err := freePort()
	if err != nil {
		return err
	}
	token := randomToken()
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	if err := writeServiceAccountKeys(dir); err != nil {
		return err
	}
	var audit []string
	if s.opts.Audit {
		s.AuditLog = filepath.Join(dir, "audit.log")
		if err := os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte(s.auditPolicy()), 0o600); err != nil {
			return err
		}
		mode := "batch"
		if s.opts.AuditBlocking {
			mode = "blocking"
		}
		audit = []string{"--audit-policy-file", filepath.Join(dir, "audit-policy.yaml"), "--audit-log-path", s.AuditLog,
			"--audit-log-format", "json", "--audit-log-mode", mode, "--audit-log-maxsize", "0"}
	}
	addr := s.opts.APIServerAddress
	if addr == "" {
		addr = "127.0.0.1"
	}
	if s.opts.AggregatorRouting {
		audit = append(audit, "--enable-aggregator-routing=true")
	}
	s.apiserver, err = startProc(dir, "kube-apiserver", nil, filepath.Join(s.opts.Tools.KubeDir, "kube-apiserver"), append([]string{
		"--etcd-servers", s.etcdURL,
		"--bind-address", addr, "--advertise-address", addr, "--secure-port", fmt.Sprint(port),
		"--cert-dir", filepath.Join(dir, "pki"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		// Knative gives every Revision two ClusterIP Services (the
		// ServerlessService's public and private ones): a /24 is full at
		// about 120 Revisions, and the benchmark runs hundreds.
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false",
		"--v", "0"}, audit...)...)
	if err != nil {
		return err
	}
	s.KubeURL = fmt.Sprintf("https://%s:%d", addr, port)
	// The stack's own client is quiet: Knative's advice on security
	// contexts, or the Endpoints deprecation, is not the tests' to act on.
	s.Rest = &rest.Config{Host: s.KubeURL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400,
		WarningHandler: rest.NoWarnings{}}
	s.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(s.Kubeconfig, s.KubeURL, token); err != nil {
		return err
	}
	if err := waitFor(ctx, s.apiserver, "kube-apiserver", 60*time.Second, s.apiServerReady(token)); err != nil {
		return err
	}
	s.Serving, err = servingclient.NewForConfig(s.Rest)
	return err
}

// apiServerReady passes once the API server's /readyz answers 200.
func (s *Stack) apiServerReady(token string) func() error {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}
	return func() error {
		req, _ := http.NewRequest(http.MethodGet, s.KubeURL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	}
}

func (s *Stack) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.opts.Tools.KubeDir, "kubectl"), append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Kubectl runs kubectl against the stack as its administrator.
func (s *Stack) Kubectl(ctx context.Context, args ...string) (string, error) {
	return s.kubectl(ctx, args...)
}

func (s *Stack) applyCRDs(ctx context.Context) error {
	if len(s.opts.CRDDirs) == 0 {
		return errors.New("no Knative CRD directories given")
	}
	args := []string{"apply", "--server-side", "--force-conflicts"}
	for _, d := range s.opts.CRDDirs {
		args = append(args, "-f", d)
	}
	if _, err := s.kubectl(ctx, args...); err != nil {
		return err
	}
	return s.waitEstablished(ctx, "services.serving.knative.dev", "configurations.serving.knative.dev",
		"revisions.serving.knative.dev", "routes.serving.knative.dev")
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitEstablished waits until the API server serves each named CRD. It polls
// rather than running kubectl wait, which fails outright instead of waiting
// when it reads a CRD whose status.conditions is still null, as a freshly
// applied one's can be.
func (s *Stack) waitEstablished(ctx context.Context, names ...string) error {
	client, err := dynamic.NewForConfig(s.Rest)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	for _, name := range names {
		err := waitFor(ctx, nil, "CRD "+name, 60*time.Second, func() error {
			crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				c, _ := c.(map[string]any)
				if c["type"] == "Established" && c["status"] == "True" {
					return nil
				}
			}
			return errors.New("not Established yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// applyDeploy applies sluice's manifests and gives the worker and receiver
// kubeconfigs with their ServiceAccounts' tokens. Without DeployDir they use
// the administrator's.
func (s *Stack) applyDeploy(ctx context.Context) error {
	s.workerKubeconfig, s.receiverKubeconfig = s.Kubeconfig, s.Kubeconfig
	sluiceKube := s.KubeURL
	if s.opts.Via != nil {
		addr, err := s.opts.Via("kube-apiserver", strings.TrimPrefix(s.KubeURL, "https://"))
		if err != nil {
			return err
		}
		sluiceKube = "https://" + addr
		if s.opts.DeployDir == "" {
			s.workerKubeconfig = filepath.Join(s.opts.Dir, "sluice.kubeconfig")
			s.receiverKubeconfig = s.workerKubeconfig
			return writeKubeconfig(s.workerKubeconfig, sluiceKube, s.Rest.BearerToken)
		}
	}
	if s.opts.DeployDir == "" {
		return nil
	}
	if _, err := s.kubectl(ctx, "apply", "--server-side", "-k", s.opts.DeployDir); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.admissionPort = port
	if err := s.InstallAdmissionWebhook(ctx); err != nil {
		return err
	}
	for _, sa := range []struct {
		name string
		into *string
	}{{"sluice-worker", &s.workerKubeconfig}, {"sluice-receiver", &s.receiverKubeconfig}} {
		token, err := s.kubectl(ctx, "create", "token", sa.name, "-n", "sluice-system", "--duration", "48h")
		if err != nil {
			return err
		}
		path := filepath.Join(s.opts.Dir, sa.name+".kubeconfig")
		if err := writeKubeconfig(path, sluiceKube, strings.TrimSpace(token)); err != nil {
			return err
		}
		*sa.into = path
	}
	return nil
}

func (s *Stack) startTemporal(ctx context.Context) error {
	if s.opts.Temporal != "" {
		s.TemporalAddr, s.sluiceTemporal = s.opts.Temporal, s.opts.Temporal
		return nil
	}
	port := s.opts.TemporalPort
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		port = p
	}
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", fmt.Sprint(port), "--log-level", "warn"}
	if !s.opts.TemporalInMemory {
		args = append(args, "--db-filename", filepath.Join(s.opts.Dir, "temporal.db"))
	}
	if s.opts.UI && s.opts.UIPort == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		s.opts.UIPort = p
	}
	if s.opts.UIPort != 0 {
		args = append(args, "--ui-port", fmt.Sprint(s.opts.UIPort))
		s.UIURL = fmt.Sprintf("http://127.0.0.1:%d", s.opts.UIPort)
	} else {
		args = append(args, "--headless")
	}
	s.TemporalAddr = fmt.Sprintf("127.0.0.1:%d", port)
	s.sluiceTemporal = s.TemporalAddr
	if s.opts.Via != nil {
		var err error
		if s.sluiceTemporal, err = s.opts.Via("temporal", s.TemporalAddr); err != nil {
			return err
		}
	}
	var err error
	s.temporal, err = startProc(s.opts.Dir, "temporal", nil, s.opts.Tools.Temporal, args...)
	if err != nil {
		return err
	}
	return s.temporalReady(ctx)
}

// temporalReady waits for the dev server to answer; `sluice setup` is both
// the readiness check and the search attributes' registration.
func (s *Stack) temporalReady(ctx context.Context) error {
	return waitFor(ctx, s.temporal, "Temporal dev server", 60*time.Second, func() error {
		out, err := exec.CommandContext(ctx, s.opts.Tools.Sluice, "setup", "--address", s.TemporalAddr).CombinedOutput()
		if err != nil {
			return fmt.Errorf("sluice setup: %v: %s", err, out)
		}
		return nil
	})
}

// StartWorker starts (or restarts) the sluice worker process.
func (s *Stack) StartWorker(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.WorkerHTTP = fmt.Sprintf("127.0.0.1:%d", port)
	s.worker, err = startProc(s.opts.Dir, "worker", s.workerEnv(), s.opts.Tools.Sluice, "worker", "--http-addr", s.WorkerHTTP)
	if err != nil {
		return err
	}
	return waitFor(ctx, s.worker, "sluice worker", 30*time.Second, httpOK("http://"+s.WorkerHTTP+"/readyz"))
}

func (s *Stack) workerEnv() []string {
	env := append([]string{"KUBECONFIG=" + s.workerKubeconfig, "TEMPORAL_ADDRESS=" + s.sluiceTemporal, "SLUICE_CLUSTER=" + s.opts.Cluster}, s.opts.WorkerEnv...)
	if s.PrometheusURL != "" {
		env = append(env, "SLUICE_PROMETHEUS_URL="+s.PrometheusURL)
	}
	if s.opts.ProgressSink != "" {
		env = append(env, "K_SINK="+s.opts.ProgressSink)
	}
	return env
}

// AddWorker starts one more sluice worker process on the same task queue,
// as scaling out does in a cluster, and returns its pid and its name (for
// Kill and Restart). It stops with the stack.
func (s *Stack) AddWorker(ctx context.Context) (int, string, error) {
	port, err := freePort()
	if err != nil {
		return 0, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	name := fmt.Sprintf("worker-%d", len(s.extra))
	p, err := s.run(ctx, name, s.workerEnv(), httpOK("http://"+addr+"/readyz"), s.opts.Tools.Sluice, "worker", "--http-addr", addr)
	if err != nil {
		return 0, "", err
	}
	return p.cmd.Process.Pid, name, nil
}

// KillWorker kills the worker with SIGKILL, as a crash would.
func (s *Stack) KillWorker() { s.worker.kill() }

// StartReceiver starts (or restarts) the sluice receiver process on the same address.
func (s *Stack) StartReceiver(ctx context.Context) error {
	if s.ReceiverURL == "" {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.ReceiverURL = fmt.Sprintf("http://127.0.0.1:%d/", port)
		s.ReceiverToken = randomToken()
		if err := os.WriteFile(filepath.Join(s.opts.Dir, "receiver-tokens"), []byte("stack "+s.ReceiverToken+"\n"), 0o600); err != nil {
			return err
		}
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(s.ReceiverURL, "http://"), "/")
	env := append([]string{"KUBECONFIG=" + s.receiverKubeconfig, "TEMPORAL_ADDRESS=" + s.sluiceTemporal, "SLUICE_CLUSTER=" + s.opts.Cluster,
		"SLUICE_RECEIVER_TOKENS_FILE=" + filepath.Join(s.opts.Dir, "receiver-tokens")}, s.opts.ReceiverEnv...)
	if s.admissionPort != 0 {
		env = append(env, fmt.Sprintf("SLUICE_ADMISSION_ADDR=127.0.0.1:%d", s.admissionPort), "SLUICE_ADMISSION_HOSTS=127.0.0.1")
		// The policy webhook judges with the worker's defaults, as the
		// deployed receiver reads the worker's sluice-defaults ConfigMap.
		for _, kv := range s.workerEnv() {
			if strings.HasPrefix(kv, "SLUICE_DEFAULT_") || strings.HasPrefix(kv, "SLUICE_PROMETHEUS_URL=") || strings.HasPrefix(kv, "SLUICE_KNATIVE_METRICS=") {
				env = append(env, kv)
			}
		}
	}
	var err error
	s.receiver, err = startProc(s.opts.Dir, "receiver", env, s.opts.Tools.Sluice, "receiver", "--listen", addr)
	if err != nil {
		return err
	}
	return waitFor(ctx, s.receiver, "sluice receiver", 30*time.Second, httpOK(s.ReceiverURL+"readyz"))
}

// InstallAdmissionWebhook applies config/deploy's admission webhook
// configurations (the mutating one and the policy webhook) with one change:
// the API server calls the stack's receiver at its loopback address (the
// configurations as deployed name the receiver's Service, which nothing here
// serves). They are applied as `kubectl apply --server-side` applies
// config/deploy, so either applies over the other; the caBundle stays the
// receiver's.
func (s *Stack) InstallAdmissionWebhook(ctx context.Context) error {
	for _, file := range []string{"520-admission-webhook.yaml", "521-policy-webhook.yaml"} {
		raw, err := os.ReadFile(filepath.Join(s.opts.DeployDir, file))
		if err != nil {
			return err
		}
		var cfg struct {
			APIVersion string           `json:"apiVersion"`
			Kind       string           `json:"kind"`
			Metadata   json.RawMessage  `json:"metadata"`
			Webhooks   []map[string]any `json:"webhooks"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("read the admission webhook configuration %s: %w", file, err)
		}
		for _, wh := range cfg.Webhooks {
			cc, _ := wh["clientConfig"].(map[string]any)
			svc, _ := cc["service"].(map[string]any)
			path, _ := svc["path"].(string)
			wh["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", s.admissionPort, path)}
		}
		out, err := json.Marshal(&cfg)
		if err != nil {
			return err
		}
		applied := filepath.Join(s.opts.Dir, strings.TrimSuffix(file, ".yaml")+".json")
		if err := os.WriteFile(applied, out, 0o600); err != nil {
			return err
		}
		if _, err := s.kubectl(ctx, "apply", "--server-side", "-f", applied); err != nil {
			return err
		}
	}
	return nil
}

// StopReceiver stops the receiver: events sent meanwhile are lost.
func (s *Stack) StopReceiver() { s.receiver.stop(5 * time.Second) }

func (s *Stack) startAdapter(ctx context.Context) error {
	cfg, _ := json.Marshal(map[string]any{
		"namespaces": []string{Namespace}, "allNamespaces": false, "mode": "Resource",
		"resources": []map[string]any{
			{"gvr": map[string]string{"Group": "serving.knative.dev", "Version": "v1", "Resource": "revisions"}},
			{"gvr": map[string]string{"Group": "serving.knative.dev", "Version": "v1", "Resource": "services"}},
		},
	})
	sinkURL := s.ReceiverURL
	if s.opts.Via != nil {
		var err error
		if sinkURL, err = s.opts.Via("events", s.ReceiverURL); err != nil {
			return err
		}
	}
	env := []string{"K_SINK=" + sinkURL, "NAMESPACE=" + Namespace, "NAME=sluice-stack", "K_COMPONENT=apiserversource",
		"K_SOURCE_CONFIG=" + string(cfg)}
	var err error
	s.adapter, err = startProc(s.opts.Dir, "apiserversource", env, s.opts.Tools.Adapter, "--kubeconfig="+s.Kubeconfig)
	if err != nil {
		return err
	}
	// The adapter has no readiness endpoint of its own worth trusting here;
	// give it a moment to list and watch, and make sure it did not die.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	if done, err := s.adapter.exited(); done {
		return fmt.Errorf("ApiServerSource adapter exited (%v):\n%s", err, s.adapter.tail(3000))
	}
	return nil
}

// auditPolicy records what sluice's benchmark and chaos runs read from the
// audit log: traffic patches with their bodies (which step a patch is),
// Revisions' status writes with theirs (when a Revision turned Ready),
// every other request on Knative's kinds without (who asked for what, and
// when). With Options.AuditPods, podsAuditRules come first.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [patch, update]
  resources: [{group: serving.knative.dev, resources: [services, routes]}]
- level: Request
  verbs: [update, patch]
  resources: [{group: serving.knative.dev, resources: [revisions/status]}]
%s- level: Metadata
  resources: [{group: serving.knative.dev}, {group: flagger.app}]
- level: None
`

func (s *Stack) auditPolicy() string {
	pods := ""
	if s.opts.AuditPods {
		pods = podsAuditRules
	}
	return fmt.Sprintf(auditPolicy, pods)
}

// podsAuditRules record Revisions as created, answer included (whether
// sluice's admission webhook bounded them), and Deployments' status writes
// (how many pods each Revision ran and had Ready).
const podsAuditRules = `- level: RequestResponse
  verbs: [create]
  resources: [{group: serving.knative.dev, resources: [revisions]}]
- level: Request
  verbs: [update, patch]
  resources: [{group: apps, resources: [deployments/status]}]
`

// Pids are the process IDs of the worker and the receiver, for reading
// their CPU time and memory from /proc.
func (s *Stack) Pids() (worker, receiver int) {
	return s.worker.cmd.Process.Pid, s.receiver.cmd.Process.Pid
}

// TemporalPid is the Temporal dev server's process ID.
func (s *Stack) TemporalPid() int { return s.temporal.cmd.Process.Pid }

// ProcessPids names every running process of the stack with its process ID,
// for a benchmark to read what each one used.
func (s *Stack) ProcessPids() map[string]int {
	out := map[string]int{}
	for _, p := range s.procs() {
		if p == nil {
			continue
		}
		if done, _ := p.exited(); !done {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

func (s *Stack) procs() []*proc {
	return append([]*proc{s.etcd, s.apiserver, s.controllerManager, s.scheduler, s.kwok, s.temporal, s.worker, s.receiver, s.adapter, s.prometheus}, s.extra...)
}

// PeakRSS lists each running process's peak resident memory (VmHWM), as
// "name 123 MiB", largest first, with the sum last.
func (s *Stack) PeakRSS() string {
	type row struct {
		name string
		kib  int64
	}
	var rows []row
	var total int64
	for _, p := range s.procs() {
		if p == nil || p.cmd.Process == nil {
			continue
		}
		if kib, ok := statusKiB(p.cmd.Process.Pid, "VmHWM:"); ok {
			rows = append(rows, row{p.name, kib})
			total += kib
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].kib > rows[j].kib })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %d MiB", r.name, r.kib/1024))
	}
	return strings.Join(append(parts, fmt.Sprintf("total %d MiB", total/1024)), ", ")
}

// Logs returns the end of every component's log, for a failed test.
func (s *Stack) Logs() string {
	var b strings.Builder
	for _, p := range s.procs() {
		if p != nil {
			fmt.Fprintf(&b, "==== %s (%s)\n%s\n", p.name, p.logPath, p.tail(4000))
		}
	}
	return b.String()
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
	for _, p := range []*proc{s.kwok, s.scheduler, s.controllerManager, s.temporal, s.apiserver, s.etcd} {
		p.stop(10 * time.Second)
	}
	if s.bridge != nil {
		s.bridge.Close()
	}
}

// httpsOK is httpOK for a server with a self-signed certificate.
func httpsOK(url string) func() error {
	return getOK(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}, url)
}

// httpOK passes once GET url answers 200.
func httpOK(url string) func() error { return getOK(http.DefaultClient, url) }

func getOK(hc *http.Client, url string) func() error {
	return func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func writeKubeconfig(path, server, token string) error {
	cfg := clientcmdConfig(server, token)
	return clientcmd.WriteToFile(*cfg, path)
}
