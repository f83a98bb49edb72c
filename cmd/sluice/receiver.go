package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/receiver"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

func newReceiverCommand() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:     "receiver",
		Short:   "Receive CloudEvents: start rollouts from Knative events, take command events",
		Example: "  sluice receiver --listen :8081\n  SLUICE_ADMISSION_ADDR=:8443 SLUICE_RECEIVER_TOKENS_FILE=/etc/sluice/tokens sluice receiver",
		Long: `Run the CloudEvents receiver. Point Knative Eventing's ApiServerSource (Resource or
Reference mode, on Revisions and Services) and any command senders at it.

It answers 4xx for events that must not be retried (with the reason), 503/429 when Temporal
or the cluster is unavailable, and 2xx once Temporal accepted the work — or, for a Revision
of an opted-in target it offers in the background (a candidate it offered already, or with
the sweep on a new one), once the offer is queued: the rollout's own watch and the sweep
make a lost one good.

Settings: SLUICE_RECEIVER_ADDR (default :8081), SLUICE_RECEIVER_MAX_BODY (bytes, default
1 MiB), SLUICE_RECEIVER_NAMESPACES (allow-list), SLUICE_RECEIVER_TOKENS_FILE ("name token"
lines), SLUICE_RECEIVER_OIDC_ISSUER and SLUICE_RECEIVER_OIDC_AUDIENCE (verify bearer JWTs),
SLUICE_RECEIVER_ALLOW_UNAUTHENTICATED_SOURCE (default true: ApiServerSource events need no
token), SLUICE_RECEIVER_SWEEP (default 30s, 0 for never: how often it offers an opted-in
target's newest Revision that no event brought, after the adapter gave up on all of them),
plus TEMPORAL_*, KUBECONFIG and SLUICE_PPROF as for the worker.

With SLUICE_ADMISSION_ADDR (e.g. :8443) it also serves the mutating admission webhook that pins
latestRevision traffic when an opted-in Service's template changes, and bounds a new Revision of a
capacity-mode target to one pod as it is created, and the validating webhook that answers a write
of a Service or Configuration carrying sluice annotations with a warning for each policy mistake
(refusing it in namespaces labelled sluice.dev/admission=strict). SLUICE_ADMISSION_HOSTS: the
names the API server calls it by; SLUICE_ADMISSION_SECRET, default
sluice-system/sluice-admission-certs: where its certificates are kept; SLUICE_ADMISSION_WEBHOOK,
default sluice-pin-latest, and SLUICE_ADMISSION_POLICY_WEBHOOK, default sluice-policy: the
webhook configurations whose caBundle it keeps; SLUICE_DEFAULT_* and SLUICE_PROMETHEUS_URL: the
worker's policy defaults, which the policy webhook judges with.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			s, err := receiverSettings(cmd, addr)
			if err != nil {
				return err
			}
			sc, err := connectServer(cmd, log, "receiver", s.Kubeconfig)
			if err != nil {
				return err
			}
			defer sc.temporal.Close()
			serve, _, err := startReceiver(cmd, log, sc, s)
			if err != nil {
				return err
			}
			return serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&addr, "listen", "", "address to receive CloudEvents on (default SLUICE_RECEIVER_ADDR or :8081)")
	return cmd
}

// receiverSettings are the receiver's settings from the environment, with
// --listen (addr), --cluster and --task-queue over them.
func receiverSettings(cmd *cobra.Command, addr string) (settings.ReceiverSettings, error) {
	s, err := settings.LoadReceiverSettings(os.LookupEnv)
	if err != nil {
		return s, err
	}
	if addr != "" {
		s.Addr = addr
	}
	return s, clusterFlags(cmd, &s.Cluster, &s.TaskQueue)
}

// startReceiver builds the receiver on sc, starts its informers (returned:
// the controller's worker follows traffic through them), its sweeps and its
// admission webhook, and binds its address; serve then answers CloudEvents
// until its context ends.
func startReceiver(cmd *cobra.Command, log *slog.Logger, sc *serverClients, s settings.ReceiverSettings) (serve func(context.Context) error, targets *knative.TargetCache, err error) {
	var tokens *receiver.StaticTokens
	if s.TokensFile != "" {
		if tokens, err = receiver.LoadStaticTokens(s.TokensFile); err != nil {
			return nil, nil, err
		}
	}
	var oidcAuth *receiver.OIDC
	if s.OIDCIssuer != "" {
		if oidcAuth, err = receiver.NewOIDC(cmd.Context(), s.OIDCIssuer, s.OIDCAudience); err != nil {
			return nil, nil, err
		}
	}
	auth := receiver.AnyOf(tokens, oidcAuth)
	if auth == nil {
		log.Warn("no authentication configured: command events will be refused", "set", settings.EnvReceiverTokensFile+" or "+settings.EnvReceiverOIDCIssuer)
	}
	ns := map[string]bool{}
	for _, n := range s.Namespaces {
		ns[n] = true
	}
	kn := knative.Client{Serving: sc.serving}
	targets, err = knative.NewTargetCache(cmd.Context(), kn, s.Namespaces)
	if err != nil {
		return nil, nil, err
	}
	rcv := &receiver.Receiver{
		Control: &control.Client{Temporal: sc.temporal, TaskQueue: s.TaskQueue, Cluster: s.Cluster, Identity: "sluice-receiver"},
		Knative: kn, Targets: targets, Auth: auth, AllowUnauthenticatedSource: s.AllowUnauthenticatedSource,
		Namespaces: ns, MaxBody: s.MaxBody, Log: log, Metrics: receiver.NewMetrics(sc.reg),
		Seen: receiver.NewSeen(100_000, 15*time.Minute),
		Gate: &receiver.Gate{Check: func(ctx context.Context) error {
			_, err := sc.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}},
	}
	mux := http.NewServeMux()
	worker.HealthRoutes(mux, sc.temporal, sc.reg, s.Profiling)
	mux.Handle("/", rcv)
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for CloudEvents on %s: %w", s.Addr, err)
	}
	if s.Admission.Addr != "" {
		if err := startAdmission(cmd, s, kn, sc.kube, log); err != nil {
			_ = ln.Close()
			return nil, nil, err
		}
	}
	go rcv.Gate.Run(cmd.Context())
	if s.Sweep > 0 {
		// The sweep makes a lost background offer again, so a new
		// candidate need not wait for Temporal before its answer.
		rcv.BackgroundStarts = true
		go rcv.RunSweeps(cmd.Context(), s.Sweep)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "receiving CloudEvents on http://%s/\n", ln.Addr())
	return func(ctx context.Context) error { return worker.ServeUntilDone(ctx, ln, mux, log) }, targets, nil
}

// startAdmission runs the admission webhook beside the receiver. It fails
// the receiver's start if the webhook cannot serve; once serving, a later
// failure is logged (the webhook's failurePolicy lets writes through).
func startAdmission(cmd *cobra.Command, s settings.ReceiverSettings, k knative.Client, kc *rest.Config, log *slog.Logger) error {
	// The policy webhook judges with the worker's defaults: the same
	// SLUICE_DEFAULT_* settings (the sluice-defaults ConfigMap).
	settings, err := settings.LoadSettings(os.LookupEnv)
	if err != nil {
		return fmt.Errorf("admission webhook: %w", err)
	}
	defaults := settings.Defaults
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return fmt.Errorf("build Kubernetes client for %s: %w", kc.Host, err)
	}
	tmpl, err := worker.NewTemplates(kc)
	if err != nil {
		return err
	}
	a := s.Admission
	serving := make(chan string, 1)
	failed := make(chan error, 1)
	srv := &admission.Server{Addr: a.Addr, Hosts: a.Hosts, SecretNamespace: a.SecretNamespace, SecretName: a.SecretName,
		Webhook: a.Webhook, PolicyWebhook: a.PolicyWebhook, Defaults: defaults,
		Kube: kube, Knative: k, Templates: tmpl, Log: log, Listening: func(addr string) { serving <- addr }}
	go func() {
		if err := srv.Run(cmd.Context()); err != nil {
			failed <- err
			log.Error("admission webhook stopped", "error", err)
		}
	}()
	select {
	case addr := <-serving:
		fmt.Fprintf(cmd.ErrOrStderr(), "serving the admission webhook on https://%s%s\n", addr, admission.Path)
		return nil
	case err := <-failed:
		return err
	}
}
