package worker

import (
	"context"
	"fmt"
	"log/slog"

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
// API key turns TLS on, as Temporal Cloud requires.
func TemporalOptions(log *slog.Logger, metrics client.MetricsHandler) (client.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return client.Options{}, fmt.Errorf("read Temporal connection settings (TEMPORAL_* and the Temporal config file): %w", err)
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

// DialTemporal connects to Temporal, saying which address it tried when it cannot.
func DialTemporal(ctx context.Context, opts client.Options) (client.Client, error) {
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w", opts.HostPort, opts.Namespace, err)
	}
	return c, nil
}

// KubeConfig loads a kubeconfig file when one is named, else the in-cluster
// config, else the usual kubeconfig locations.
func KubeConfig(kubeconfig string) (*rest.Config, error) {
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
