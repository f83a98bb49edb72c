package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	tlog "go.temporal.io/sdk/log"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
)

// TemporalOptions reads the Temporal connection from the environment and the
// Temporal config file, following the SDK's conventions: TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_PROFILE. An
// API key turns TLS on, as Temporal Cloud requires. SLUICE_TEMPORAL_COMPRESSION
// says how its gRPC requests are compressed (temporalCompression).
func TemporalOptions(log *slog.Logger, metrics client.MetricsHandler) (client.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return client.Options{}, fmt.Errorf("read Temporal connection settings (TEMPORAL_* and the Temporal config file): %w", err)
	}
	if opts.ConnectionOptions.GrpcCompression, err = temporalCompression(os.LookupEnv); err != nil {
		return client.Options{}, err
	}
	if opts.HostPort == "" {
		opts.HostPort = client.DefaultHostPort
	}
	if opts.Namespace == "" {
		opts.Namespace = client.DefaultNamespace
	}
	opts.Logger = tlog.NewStructuredLogger(log)
	if metrics != nil {
		opts.MetricsHandler = metrics
	}
	return opts, nil
}

// EnvTemporalCompression is none (the default) or gzip.
const EnvTemporalCompression = "SLUICE_TEMPORAL_COMPRESSION"

// temporalCompression is the compression of sluice's gRPC requests to
// Temporal, and so of Temporal's answers. The SDK's default is gzip; sluice's
// default is none: its messages are small (a step's input and result are a
// few hundred bytes), and gzip cost 8% of a busy worker's CPU in profiles
// under make bench-peers, spent again by the Temporal server on the other
// end of every poll, heartbeat and answer. gzip is for a link where bytes
// cost more than CPU.
func temporalCompression(lookup func(string) (string, bool)) (client.GrpcCompression, error) {
	v, _ := lookup(EnvTemporalCompression)
	switch strings.TrimSpace(v) {
	case "", "none":
		return &client.GrpcCompressionNone{}, nil
	case "gzip":
		return &client.GrpcCompressionGzip{}, nil
	}
	return nil, fmt.Errorf("%s: must be none or gzip, got %q", EnvTemporalCompression, v)
}

// DialTemporal connects to Temporal, saying which address it tried when it cannot.
func DialTemporal(ctx context.Context, opts client.Options) (client.Client, error) {
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w", opts.HostPort, opts.Namespace, err)
	}
	return c, nil
}

// Client-side rate limits on sluice's Kubernetes API requests. client-go's
// own default (5 per second, bursts of 10) throttles sluice as soon as a few
// dozen rollouts step at once: each step reads and writes a handful of
// objects within a second. A mass deploy asks for more: each rollout's start
// makes about a dozen requests, and at 50 a second one worker starting
// thousands at about 7 a second queued its requests past its activities'
// deadlines and failed rollouts (make bench-fleet, docs/benchmarks.md). The
// API server protects itself with its own priority and fairness; this limit
// only keeps one worker from flooding it.
const (
	EnvKubeQPS       = "SLUICE_KUBE_QPS"
	EnvKubeBurst     = "SLUICE_KUBE_BURST"
	DefaultKubeQPS   = 200
	DefaultKubeBurst = 400
)

// KubeConfig loads a kubeconfig file when one is named, else the in-cluster
// config, else the usual kubeconfig locations; SLUICE_KUBE_QPS and
// SLUICE_KUBE_BURST set its rate limits.
func KubeConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := loadKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg.QPS, cfg.Burst, err = kubeRate(os.LookupEnv); err != nil {
		return nil, err
	}
	cfg.WarningHandler = &warnOnce{seen: map[string]bool{}}
	return cfg, nil
}

// warnOnce logs each distinct API-server warning once. Knative's webhook
// warns on every write of a Service whose template it finds insecure: one
// line per traffic step would bury everything else in the worker's log.
type warnOnce struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (w *warnOnce) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	seen := w.seen[text]
	w.seen[text] = true
	w.mu.Unlock()
	if !seen {
		slog.Warn("Kubernetes API warning (logged once)", "warning", text, "agent", agent)
	}
}

func kubeRate(lookup func(string) (string, bool)) (float32, int, error) {
	qps, burst := float32(DefaultKubeQPS), DefaultKubeBurst
	if v, ok := lookup(EnvKubeQPS); ok && strings.TrimSpace(v) != "" {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 32)
		if err != nil || f <= 0 {
			return 0, 0, fmt.Errorf("%s: want requests per second above 0, got %q", EnvKubeQPS, v)
		}
		qps = float32(f)
	}
	if v, ok := lookup(EnvKubeBurst); ok && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return 0, 0, fmt.Errorf("%s: want a whole number of requests of at least 1, got %q", EnvKubeBurst, v)
		}
		burst = n
	}
	return qps, burst, nil
}

func loadKubeConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes config (kubeconfig %q, in-cluster not available): %w", kubeconfig, err)
	}
	return cfg, nil
}

// ServingClient builds the typed Knative Serving client.
func ServingClient(cfg *rest.Config) (servingclient.Interface, error) {
	c, err := servingclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build Knative Serving client for %s: %w", cfg.Host, err)
	}
	return c, nil
}

// ContextNamespace is the namespace kubectl would use: the current
// context's in kubeconfig (or KUBECONFIG), the pod's own in a cluster, else
// "default".
func ContextNamespace(kubeconfig string) string {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}
