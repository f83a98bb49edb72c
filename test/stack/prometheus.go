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

	"github.com/sluicehq/sluice/test/requestsim"
)

// RequestRate is the simulated request rate of each Route, per second.
const RequestRate = 50

// startPrometheus starts the request-metrics simulator and a Prometheus
// server that scrapes it every second, as a cluster's Prometheus scrapes
// queue-proxies.
func (s *Stack) startPrometheus(ctx context.Context) error {
	if !s.opts.Prometheus {
		return nil
	}
	if s.opts.Tools.Prometheus == "" {
		return errors.New("the stack's Prometheus needs SLUICE_PROMETHEUS_BIN (test/tools/install.sh prometheus installs Debian's prometheus)")
	}
	sim := requestsim.New(s.Serving, Namespace, RequestRate, s.opts.Log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", sim.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	simCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sim.Run(simCtx, 200*time.Millisecond)
	}()
	s.stopMetrics = func() {
		cancel()
		<-done
		_ = srv.Close()
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
`, ln.Addr().String())
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
