package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// RequestRate is the simulated request rate of each Route, per second.
const RequestRate = 50

// startPrometheus starts a Prometheus server that scrapes the data plane's
// request metrics every second, as a cluster's Prometheus scrapes
// queue-proxies.
func (s *Stack) startPrometheus(ctx context.Context) error {
	if !s.opts.Prometheus {
		return nil
	}
	if s.opts.Tools.Prometheus == "" {
		return errors.New("the stack's Prometheus needs SLUICE_PROMETHEUS_BIN (test/tools/install.sh prometheus installs Debian's prometheus)")
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(s.opts.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: queue-proxy
    static_configs:
      - targets: [%q]
`, s.metrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.prometheus, err = startProc(s.opts.Dir, "prometheus", nil, s.opts.Tools.Prometheus,
		"--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr, "--log.level", "warn")
	if err != nil {
		return err
	}
	s.PrometheusURL = "http://" + addr
	return waitFor(ctx, s.prometheus, "Prometheus", 60*time.Second, httpOK(s.PrometheusURL+"/-/ready"))
}

// serveLocal serves h on a free loopback port.
func serveLocal(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln.Addr().String(), nil
}
