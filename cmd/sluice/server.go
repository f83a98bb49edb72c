package main

import (
	"k8s.io/client-go/rest"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/version"
	"github.com/sluicehq/sluice/worker"
)

// serverClients are what the long-running verbs (worker, receiver) connect
// to: Temporal, with its SDK metrics in reg, and Knative Serving.
type serverClients struct {
	temporal client.Client
	serving  servingclient.Interface
	reg      *prometheus.Registry
	kube     *rest.Config
	// namespace is the Temporal namespace.
	namespace string
}

// connectServer dials Temporal (TEMPORAL_* settings, overridden by the
// --address and --temporal-namespace flags) and the cluster of kubeconfig,
// for the program (worker, receiver) it names to Temporal with its version.
func connectServer(cmd *cobra.Command, log *slog.Logger, program, kubeconfig string) (*serverClients, error) {
	reg, metrics := worker.NewRegistry(log, program)
	worker.RegisterKubeMetrics(reg)
	opts, err := worker.TemporalOptions(log, metrics)
	if err != nil {
		return nil, err
	}
	if a := cmd.Flag("address").Value.String(); a != "" {
		opts.HostPort = a
	}
	if n := cmd.Flag("temporal-namespace").Value.String(); n != "" {
		opts.Namespace = n
	}
	host, _ := os.Hostname()
	opts.Identity = version.Identity(program, os.Getpid(), host)
	tc, err := worker.DialTemporal(cmd.Context(), opts)
	if err != nil {
		return nil, err
	}
	kc, err := worker.KubeConfig(kubeconfig)
	if err == nil {
		var serving servingclient.Interface
		if serving, err = worker.ServingClient(kc); err == nil {
			return &serverClients{temporal: tc, serving: serving, reg: reg, kube: kc, namespace: opts.Namespace}, nil
		}
	}
	tc.Close()
	return nil, err
}
