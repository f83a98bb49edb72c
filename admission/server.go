package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/templates"
)

// Server serves the webhook over TLS and keeps its configuration's
// caBundle current.
type Server struct {
	// Addr is the TLS listen address, e.g. ":8443".
	Addr string
	// Hosts are the names (or IPs) the API server dials the webhook by: the
	// serving certificate's subject alternative names.
	Hosts []string
	// SecretNamespace and SecretName hold the shared certificates.
	SecretNamespace, SecretName string
	// Webhook names the MutatingWebhookConfiguration whose caBundle is
	// kept, PolicyWebhook the ValidatingWebhookConfiguration; "" leaves one
	// to someone else.
	Webhook, PolicyWebhook string
	// Defaults are the worker's policy defaults, which the policy webhook
	// judges with.
	Defaults config.Defaults
	Kube     kubernetes.Interface
	// Knative reads the targets of new Revisions.
	Knative knative.Client
	// Templates reads the analysis templates policies name.
	Templates templates.Source
	Log       *slog.Logger
	// Listening, if set, is told the address once it serves.
	Listening func(addr string)
}

// injectEvery is how often the caBundle is checked.
const injectEvery = 30 * time.Second

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	certs, err := SharedCerts(ctx, s.Kube, s.SecretNamespace, s.SecretName, s.Hosts, time.Now())
	if err != nil {
		return fmt.Errorf("admission webhook: %w", err)
	}
	pair, err := certs.TLS()
	if err != nil {
		return fmt.Errorf("admission webhook: serving certificate: %w", err)
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("admission webhook: listen on %s: %w", s.Addr, err)
	}
	mux := http.NewServeMux()
	h := &Handler{Knative: s.Knative, Log: s.Log, Defaults: s.Defaults, Templates: s.Templates}
	mux.Handle(Path, h)
	mux.Handle(BoundPath, h)
	mux.Handle(PolicyPath, h)
	mux.Handle(PolicyStrictPath, h)
	srv := &http.Server{
		Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	if s.Listening != nil {
		s.Listening(ln.Addr().String())
	}
	s.Log.Info("admission webhook serving", "addr", ln.Addr().String(), "path", Path, "webhook", s.Webhook)
	tick := time.NewTicker(injectEvery)
	defer tick.Stop()
	warned := map[string]bool{}
	for {
		for _, cfg := range [][2]string{{Mutating, s.Webhook}, {Validating, s.PolicyWebhook}} {
			kind, name := cfg[0], cfg[1]
			if name == "" {
				continue
			}
			changed, err := InjectCABundle(ctx, s.Kube, kind, name, certs.CA)
			switch {
			case err != nil && !warned[name]:
				s.Log.Warn("admission webhook: cannot keep the caBundle; the API server will not trust the webhook until this works", "kind", kind, "error", err)
				warned[name] = true
			case err == nil && changed:
				s.Log.Info("admission webhook: wrote the caBundle", "kind", kind, "webhook", name)
				warned[name] = false
			case err == nil:
				warned[name] = false
			}
		}
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
			return nil
		case err := <-done:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("admission webhook: %w", err)
		case <-tick.C:
		}
	}
}
