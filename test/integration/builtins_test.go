package integration

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/measure"
)

// exposition writes one histogram in Prometheus' text format: perSecond
// requests a second since start, every one in the bucket ending at le.
func exposition(b *strings.Builder, name, labels string, bounds []float64, le, perSecond float64, start time.Time) {
	n := requestsSince(start, perSecond)
	for _, bound := range bounds {
		c := 0.0
		if bound >= le {
			c = n
		}
		fmt.Fprintf(b, "%s_bucket{%sle=\"%g\"} %g\n", name, labels, bound, c)
	}
	fmt.Fprintf(b, "%s_bucket{%sle=\"+Inf\"} %g\n%s_sum{%s} %g\n%s_count{%s} %g\n",
		name, labels, n, name, strings.TrimSuffix(labels, ","), n*le, name, strings.TrimSuffix(labels, ","), n)
}

// requestsSince counts perSecond requests for each whole second since
// start. Every series of a target grows in the same steps, so a ratio of
// their increases is exact over any window (counted per request, a slow
// scrape under load could catch 39 good of 48, not 40 of 50).
func requestsSince(start time.Time, perSecond float64) float64 {
	return math.Floor(time.Since(start).Seconds()) * perSecond
}

// The built-in checks on a real Prometheus, over the three shapes a
// cluster's queue-proxy metrics come in: OpenTelemetry as Knative exports it
// (the Revision on target_info only, as the e2e tests' real queue-proxies
// show), OpenTelemetry with the Revision copied onto each series (as a
// collector may), and the OpenCensus names of older Knative releases. The
// series are written here, in those shapes; the queries are sluice's own.
func TestBuiltinChecksOnRealPrometheus(t *testing.T) {
	bin := toolBin(t, "SLUICE_PROMETHEUS_BIN", "Prometheus")
	seconds := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5}
	millis := []float64{5, 10, 25, 50, 100, 250, 500, 1000, 2500}
	start := time.Now()
	targets := map[string]func(b *strings.Builder){
		// One pod of the candidate: 40 good and 10 failed requests a
		// second, in 10-25 ms; its Revision only on target_info.
		"/otel": func(b *strings.Builder) {
			exposition(b, "kn_serving_invocation_duration_seconds", `http_response_status_code="200",`, seconds, 0.025, 40, start)
			exposition(b, "kn_serving_invocation_duration_seconds", `http_response_status_code="500",`, seconds, 0.025, 10, start)
			b.WriteString(`target_info{k8s_namespace_name="default",kn_revision_name="otel-00002",kn_service_name="otel"} 1` + "\n")
		},
		// A pod of another Revision, failing everything, slowly: none of
		// it may leak into the candidate's numbers.
		"/otel-other": func(b *strings.Builder) {
			exposition(b, "kn_serving_invocation_duration_seconds", `http_response_status_code="503",`, seconds, 2.5, 100, start)
			b.WriteString(`target_info{k8s_namespace_name="default",kn_revision_name="otel-00001",kn_service_name="otel"} 1` + "\n")
		},
		"/otel-labelled": func(b *strings.Builder) {
			exposition(b, "kn_serving_invocation_duration_seconds", `k8s_namespace_name="default",kn_revision_name="direct-00002",http_response_status_code="200",`, seconds, 0.75, 20, start)
		},
		"/opencensus": func(b *strings.Builder) {
			for _, c := range []struct {
				class string
				rate  float64
			}{{"2xx", 45}, {"5xx", 5}} {
				exposition(b, "revision_request_latencies", `namespace_name="default",revision_name="census-00002",response_code_class="`+c.class+`",`, millis, 250, c.rate, start)
				n := requestsSince(start, c.rate)
				fmt.Fprintf(b, "revision_request_count{namespace_name=\"default\",revision_name=\"census-00002\",response_code_class=%q} %g\n", c.class, n)
			}
		},
	}
	mux := http.NewServeMux()
	for path, write := range targets {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			var b strings.Builder
			write(&b)
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			fmt.Fprint(w, b.String())
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global: {scrape_interval: 1s}\nscrape_configs:\n")
	for path := range targets {
		fmt.Fprintf(&cfg, "  - {job_name: %q, metrics_path: %q, static_configs: [{targets: [%q]}]}\n", strings.Trim(path, "/"), path, host)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config.file", filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path", filepath.Join(dir, "data"), "--web.listen-address", addr, "--log.level", "warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("Prometheus' log:\n%s", logs.String())
		}
	})
	prom, base := measure.Prometheus{}, "http://"+addr
	for ready := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(ready) {
			t.Fatalf("Prometheus not ready after 30s: %v", err)
		}
	}
	measure := func(metrics, builtin, revision string) (*float64, *float64, error) {
		d := config.BuiltinDefaults()
		d.PrometheusURL = base
		p, err := config.FromAnnotations(map[string]string{config.AnnotationAnalysis: fmt.Sprintf("knativeMetrics: %s\nchecks:\n- {name: c, builtin: %s}", metrics, builtin)}, d)
		if err != nil {
			return nil, nil, err
		}
		vars := config.TemplateVars{Namespace: "default", Candidate: revision, Revision: revision, Window: "5s"}
		q, _ := config.RenderQuery(p.Analysis.Checks[0].Query, vars)
		s, _ := config.RenderQuery(p.Analysis.Checks[0].Series, vars)
		v, err := prom.Query(ctx, base, q, time.Now())
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", q, err)
		}
		n, err := prom.Query(ctx, base, s, time.Now())
		return v, n, err
	}
	for _, tt := range []struct {
		metrics, builtin, revision string
		lo, hi                     float64
	}{
		{config.MetricsOpenTelemetry, config.BuiltinSuccessRate, "otel-00002", 0.79, 0.81},
		{config.MetricsOpenTelemetry, config.BuiltinLatencyP99, "otel-00002", 10, 25},
		{config.MetricsOpenTelemetry, config.BuiltinSuccessRate, "otel-00001", 0, 0},
		{config.MetricsOpenTelemetry, config.BuiltinSuccessRate, "direct-00002", 1, 1},
		{config.MetricsOpenTelemetry, config.BuiltinLatencyP50, "direct-00002", 500, 750},
		{config.MetricsOpenCensus, config.BuiltinSuccessRate, "census-00002", 0.89, 0.91},
		{config.MetricsOpenCensus, config.BuiltinLatencyP95, "census-00002", 100, 250},
		// Every request's time is its bucket's bound: the mean is exact.
		{config.MetricsOpenTelemetry, config.BuiltinLatencyMean, "otel-00002", 24.99, 25.01},
		{config.MetricsOpenTelemetry, config.BuiltinLatencyMean, "direct-00002", 749.9, 750.1},
		{config.MetricsOpenCensus, config.BuiltinLatencyMean, "census-00002", 249.9, 250.1},
	} {
		var v, n *float64
		deadline := time.Now().Add(30 * time.Second)
		for v == nil && time.Now().Before(deadline) {
			if v, n, err = measure(tt.metrics, tt.builtin, tt.revision); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if v == nil || *v < tt.lo || *v > tt.hi || n == nil || *n < 1 {
			t.Errorf("%s %s of %s = %v (series %v), want [%g, %g]", tt.metrics, tt.builtin, tt.revision, deref(v), deref(n), tt.lo, tt.hi)
			continue
		}
		t.Logf("%s %s of %s = %.4g", tt.metrics, tt.builtin, tt.revision, *v)
	}
	// A Revision nothing exports: no data, and no series at all.
	v, n, err := measure(config.MetricsOpenTelemetry, config.BuiltinSuccessRate, "missing-00001")
	if err != nil || v != nil || n != nil {
		t.Fatalf("missing Revision: value %v, series %v, %v", deref(v), deref(n), err)
	}
	compareOnRealPrometheus(t, base)
}

// compareOnRealPrometheus runs built-in comparisons as the worker does,
// through range queries: otel-00002 (80% success, 25 ms, the Revision on
// target_info) against direct-00002 (all good, 750 ms, the Revision on
// each series), each as candidate and as stable.
func compareOnRealPrometheus(t *testing.T, base string) {
	d := config.BuiltinDefaults()
	d.PrometheusURL = base
	p, err := config.FromAnnotations(map[string]string{config.AnnotationAnalysis: `
checks:
- {name: errors, builtin: success-rate, window: 12s, compare: {step: 2s, minSamples: 5}}
- {name: latency, builtin: latency-mean, window: 12s, compare: {step: 2s, minSamples: 5}}
`}, d)
	if err != nil {
		t.Fatal(err)
	}
	ms := measure.Measurer{}
	for _, tt := range []struct {
		check, candidate, stable string
		want                     analysis.Result
	}{
		{"errors", "otel-00002", "direct-00002", analysis.Failed},  // 20 points lower
		{"errors", "direct-00002", "otel-00002", analysis.Passed},  // higher is not worse
		{"latency", "direct-00002", "otel-00002", analysis.Failed}, // 30 times slower
		{"latency", "otel-00002", "direct-00002", analysis.Passed},
	} {
		c := p.Analysis.Checks[0]
		if tt.check == "latency" {
			c = p.Analysis.Checks[1]
		}
		in := measure.CheckInput{Check: c, Prometheus: base, Vars: config.TemplateVars{Namespace: "default", Candidate: tt.candidate, Stable: tt.stable}}
		var m analysis.Measurement
		// Until Prometheus holds enough samples of both.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			if m = ms.Check(context.Background(), in); m.Result != analysis.Inconclusive {
				break
			}
		}
		if m.Result != tt.want || m.Compare == nil || m.Compare.Candidate.Count < 5 {
			t.Errorf("%s of %s against %s: %s", tt.check, tt.candidate, tt.stable, m.Summary())
			continue
		}
		t.Logf("%s", m.Summary())
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
