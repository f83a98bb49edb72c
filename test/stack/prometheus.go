package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"
)

// RequestRate is the simulated request rate of each Route, per second.
const RequestRate = 50

// ScrapeConfig is the Prometheus scrape job docs/analysis.md tells users
// to apply, relative to the repository's root: the stack's Prometheus runs
// exactly it.
const ScrapeConfig = "config/prometheus/queue-proxy-scrape.yaml"

// startPrometheus starts a Prometheus server in a network namespace of its
// own, from which pod IPs are routed to the data plane, with the scrape job
// of ScrapeConfig: it discovers the pods through the API server and scrapes
// each real queue-proxy at its pod's IP, every second. Only what a cluster
// gives a Prometheus in it is added: where the API server is, and a token.
func (s *Stack) startPrometheus(ctx context.Context) error {
	if !s.opts.Prometheus {
		return nil
	}
	if s.opts.Tools.Prometheus == "" {
		return errors.New("the stack's Prometheus needs SLUICE_PROMETHEUS_BIN (test/tools/install.sh prometheus installs Debian's prometheus)")
	}
	dir := filepath.Join(s.opts.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(s.opts.Root, ScrapeConfig))
	if err != nil {
		return err
	}
	var jobs []map[string]any
	if err := yaml.Unmarshal(raw, &jobs); err != nil {
		return fmt.Errorf("%s: %w", ScrapeConfig, err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(s.Rest.BearerToken), 0o600); err != nil {
		return err
	}
	for _, job := range jobs {
		sds, _ := job["kubernetes_sd_configs"].([]any)
		for _, sd := range sds {
			if m, ok := sd.(map[string]any); ok {
				m["api_server"] = s.KubeURL
				m["tls_config"] = map[string]any{"insecure_skip_verify": true}
				m["authorization"] = map[string]any{"credentials_file": token}
				m["namespaces"] = map[string]any{"names": []string{Namespace}}
			}
		}
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"scrape_configs": jobs,
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), cfg, 0o644); err != nil {
		return err
	}
	name, addr, err := s.bridge.Namespace(ctx, netnsPrometheus)
	if err != nil {
		return err
	}
	if err := s.bridge.In(ctx, name, "route", "add", PodCIDR, "via", s.bridge.Addr(netnsDataPlane)); err != nil {
		return err
	}
	listen := addr + ":9090"
	args := append(Exec(name), s.opts.Tools.Prometheus,
		"--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", listen, "--log.level", "warn")
	s.prometheus, err = startProc(s.opts.Dir, "prometheus", nil, args[0], args[1:]...)
	if err != nil {
		return err
	}
	s.PrometheusURL = "http://" + listen
	return waitFor(ctx, s.prometheus, "Prometheus", 60*time.Second, httpOK(s.PrometheusURL+"/-/ready"))
}
