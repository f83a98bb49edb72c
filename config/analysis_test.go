package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
)

func analysisPolicy(t *testing.T, doc string, d Defaults) (*Analysis, error) {
	t.Helper()
	p, err := FromAnnotations(map[string]string{AnnotationAnalysis: doc}, d)
	return p.Analysis, err
}

func TestAnalysisParsesBuiltinsChecksAndWebhooks(t *testing.T) {
	d := BuiltinDefaults()
	d.PrometheusURL = "http://prometheus:9090"
	an, err := analysisPolicy(t, `
interval: 15s
checks:
  - name: success
    builtin: success-rate
  - name: p99
    builtin: latency-p99
    max: 250
    failureLimit: 2
  - name: cpu
    query: sum(rate(cpu{revision="{{.Candidate}}"}[{{.Window}}]))
    max: 0.8
    window: 2m
    consecutiveErrorLimit: 1
webhooks:
  - name: smoke
    at: hold
    url: http://tester.default/run
    retries: 0
    metadata: {suite: smoke}
  - name: approve
    at: gate
    url: https://approvals.example.com/sluice
    timeout: 3s
`, d)
	if err != nil {
		t.Fatal(err)
	}
	if an.Interval != 15*time.Second || an.Prometheus != "http://prometheus:9090" {
		t.Fatalf("interval/prometheus = %s %q", an.Interval, an.Prometheus)
	}
	if len(an.Checks) != 3 || len(an.Webhooks) != 2 {
		t.Fatalf("checks %d webhooks %d", len(an.Checks), len(an.Webhooks))
	}
	s := an.Checks[0]
	if s.Builtin != BuiltinSuccessRate || s.Min == nil || *s.Min != 0.99 || s.Max != nil || !strings.Contains(s.Query, "kn_serving_invocation_duration_seconds_count") || an.KnativeMetrics != MetricsOpenTelemetry {
		t.Fatalf("success-rate check = %+v", s)
	}
	// The default window is the interval, but at least a minute.
	if s.Window != time.Minute || s.ConsecutiveErrorLimit != DefaultConsecutiveErrorLimit || s.InconclusiveLimit != DefaultInconclusiveLimit || s.FailureLimit != 0 {
		t.Fatalf("defaults not applied: %+v", s)
	}
	p99 := an.Checks[1]
	if p99.Min != nil || p99.Max == nil || *p99.Max != 250 || p99.FailureLimit != 2 {
		t.Fatalf("latency override = %+v", p99)
	}
	if c := an.Checks[2]; c.Window != 2*time.Minute || c.ConsecutiveErrorLimit != 1 {
		t.Fatalf("custom check = %+v", c)
	}
	smoke, approve := an.Webhooks[0], an.Webhooks[1]
	if smoke.Retries != 0 || smoke.Timeout != DefaultWebhookTimeout || smoke.Metadata["suite"] != "smoke" {
		t.Fatalf("smoke = %+v", smoke)
	}
	if approve.At != MomentGate || approve.Timeout != 3*time.Second || approve.Retries != DefaultWebhookRetries {
		t.Fatalf("approve = %+v", approve)
	}
	if got := an.Hooks(MomentGate); len(got) != 1 || got[0].Name != "approve" {
		t.Fatalf("Hooks(gate) = %+v", got)
	}
	if !an.Analyses() {
		t.Fatal("Analyses() = false with checks")
	}
}

func TestAnalysisErrorsNameTheProblem(t *testing.T) {
	d := BuiltinDefaults()
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"not yaml", "checks: [", []string{"sluice.dev/analysis: is not valid YAML: line 1"}},
		{"unknown field", "checks:\n- name: a\n  builtin: success-rate\n  maximum: 3\nprometheus: http://p", []string{`unknown field "checks[0].maximum"; did you mean "checks[0].max"?`}},
		{"empty", "interval: 10s", []string{"lists no checks and no webhooks"}},
		{"no prometheus", "checks:\n- name: a\n  builtin: success-rate", []string{"no Prometheus to query", "SLUICE_PROMETHEUS_URL"}},
		{"unknown builtin", "prometheus: http://p\nchecks:\n- name: a\n  builtin: error-rate", []string{`builtin "error-rate" is unknown; use one of latency-mean, latency-p50, latency-p95, latency-p99, success-rate`}},
		{"no bounds", "prometheus: http://p\nchecks:\n- name: a\n  query: up", []string{"no min and no max, so it could never fail"}},
		{"min above max", "prometheus: http://p\nchecks:\n- name: a\n  query: up\n  min: 2\n  max: 1", []string{"min 2 is above max 1"}},
		{"bad template", "prometheus: http://p\nchecks:\n- name: a\n  query: 'up{r=\"{{.Canidate}}\"}'\n  max: 1", []string{`check "a": query is not a valid template`, "Canidate"}},
		{"duplicate names", "webhooks:\n- name: a\n  at: hold\n  url: http://h\n- name: a\n  at: gate\n  url: http://h", []string{`name "a" is used twice`}},
		{"bad moment and url", "webhooks:\n- name: a\n  at: during\n  url: hooks.local/x", []string{`at "during" must be one of before-start, hold, gate, after-end, rollback`, "must be an absolute http:// or https:// URL"}},
		{"bad interval", "interval: 10\nwebhooks:\n- name: a\n  at: hold\n  url: http://h", []string{`interval "10" must be a duration of at least 1s`}},
		{"unknown metrics", "knativeMetrics: prometheus\nprometheus: http://p\nchecks:\n- name: a\n  builtin: success-rate", []string{`knativeMetrics "prometheus" must be one of opencensus, opentelemetry`}},
		{"negative limit", "prometheus: http://p\nchecks:\n- name: a\n  builtin: success-rate\n  failureLimit: -1", []string{"failureLimit -1 must not be negative"}},
		{"bad name", "webhooks:\n- name: Smoke Test\n  at: hold\n  url: http://h", []string{`webhook name "Smoke Test" must be lower-case`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := analysisPolicy(t, tt.doc, d)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestRenderQuery(t *testing.T) {
	vars := TemplateVars{Namespace: "shop", Candidate: "cart-00001", Revision: "cart-00002", Window: PromDuration(90 * time.Second)}
	// OpenTelemetry: the Revision is on target_info (joined per scrape
	// target), or on the series themselves; OpenCensus: on the series.
	join := ` * on (job, instance) group_left () max by (job, instance) (target_info{k8s_namespace_name="shop",kn_revision_name="cart-00002"}))`
	direct := `{k8s_namespace_name="shop",kn_revision_name="cart-00002"`
	for _, tt := range []struct{ metrics, check, want string }{
		{MetricsOpenTelemetry, BuiltinSuccessRate, `1 - ((sum (rate(kn_serving_invocation_duration_seconds_count{http_response_status_code=~"5.."}[90s])` + join +
			` or sum (rate(kn_serving_invocation_duration_seconds_count` + direct + `,http_response_status_code=~"5.."}[90s])) or vector(0))` +
			` / (sum (rate(kn_serving_invocation_duration_seconds_count[90s])` + join +
			` or sum (rate(kn_serving_invocation_duration_seconds_count` + direct + `}[90s]))))`},
		{MetricsOpenTelemetry, BuiltinLatencyP99, `1000 * histogram_quantile(0.99, sum by (le) (rate(kn_serving_invocation_duration_seconds_bucket[90s])` + join +
			` or sum by (le) (rate(kn_serving_invocation_duration_seconds_bucket` + direct + `}[90s])))`},
		{MetricsOpenCensus, BuiltinSuccessRate, `1 - ((sum (rate(revision_request_count{namespace_name="shop",revision_name="cart-00002",response_code_class="5xx"}[90s])) or vector(0))` +
			` / (sum (rate(revision_request_count{namespace_name="shop",revision_name="cart-00002"}[90s]))))`},
		{MetricsOpenCensus, BuiltinLatencyP50, `histogram_quantile(0.5, sum by (le) (rate(revision_request_latencies_bucket{namespace_name="shop",revision_name="cart-00002"}[90s])))`},
		{MetricsOpenCensus, BuiltinLatencyMean, `((sum (rate(revision_request_latencies_sum{namespace_name="shop",revision_name="cart-00002"}[90s]))) / (sum (rate(revision_request_count{namespace_name="shop",revision_name="cart-00002"}[90s]))))`},
	} {
		b, ok := builtinFor(tt.metrics, tt.check)
		if !ok {
			t.Fatalf("%s %s: no built-in", tt.metrics, tt.check)
		}
		got, err := RenderQuery(b.query, vars)
		if err != nil || got != tt.want {
			t.Fatalf("%s %s: RenderQuery =\n%s (%v)\nwant\n%s", tt.metrics, tt.check, got, err, tt.want)
		}
	}
	if _, err := RenderQuery("{{.Nope}}", TemplateVars{}); err == nil {
		t.Fatal("unknown variable rendered without error")
	}
	if PromDuration(300*time.Millisecond) != "1s" || PromDuration(2*time.Minute) != "120s" {
		t.Fatal("PromDuration")
	}
}

func TestKnativeMetricsFromDocumentOrWorker(t *testing.T) {
	d := BuiltinDefaults()
	d.PrometheusURL, d.KnativeMetrics = "http://p", MetricsOpenCensus
	doc := "checks:\n- {name: ok, builtin: success-rate}\n"
	an, err := analysisPolicy(t, doc, d)
	if err != nil || an.KnativeMetrics != MetricsOpenCensus || !strings.Contains(an.Checks[0].Query, "revision_request_count") {
		t.Fatalf("worker default: %+v, %v", an, err)
	}
	an, err = analysisPolicy(t, "knativeMetrics: opentelemetry\n"+doc, d)
	if err != nil || !strings.Contains(an.Checks[0].Query, "kn_serving_invocation_duration_seconds_count") {
		t.Fatalf("document's choice: %+v, %v", an, err)
	}
}

func TestAnalysisParsesComparisons(t *testing.T) {
	d := BuiltinDefaults()
	d.PrometheusURL = "http://prometheus:9090"
	an, err := analysisPolicy(t, `
checks:
  - name: latency
    builtin: latency-mean
    compare: true
  - name: errors
    builtin: success-rate
    compare: {effect: 0.01, confidence: 0.99, minSamples: 5, step: 10s}
    window: 1m
    critical: true
  - name: queue
    query: sum(rate(queue_depth{revision="{{.Revision}}"}[{{.Window}}]))
    compare: {direction: either, effect: 25%}
    weight: 2
    dryRun: true
  - name: p99
    builtin: latency-p99
score: {pass: 90}
`, d)
	if err != nil {
		t.Fatal(err)
	}
	lat, errs, queue, p99 := an.Checks[0], an.Checks[1], an.Checks[2], an.Checks[3]
	want := analysis.Comparison{Direction: analysis.Increase, Effect: analysis.Effect{Value: 10, Relative: true}, Confidence: 0.95, MinSamples: 8}
	if lat.Compare == nil || *lat.Compare != want || lat.Min != nil || lat.Max != nil || lat.Step != 30*time.Second || lat.Window != 5*time.Minute || lat.Weight != 1 || lat.Critical {
		t.Fatalf("latency = %+v %+v", lat, lat.Compare)
	}
	want = analysis.Comparison{Direction: analysis.Decrease, Effect: analysis.Effect{Value: 0.01}, Confidence: 0.99, MinSamples: 5}
	if errs.Compare == nil || *errs.Compare != want || errs.Step != 10*time.Second || errs.Window != time.Minute || !errs.Critical {
		t.Fatalf("errors = %+v %+v", errs, errs.Compare)
	}
	want = analysis.Comparison{Direction: analysis.Either, Effect: analysis.Effect{Value: 25, Relative: true}, Confidence: 0.95, MinSamples: 8}
	if queue.Compare == nil || *queue.Compare != want || queue.Weight != 2 || !queue.DryRun {
		t.Fatalf("queue = %+v %+v", queue, queue.Compare)
	}
	if p99.Compare != nil || p99.Max == nil || *p99.Max != 500 {
		t.Fatalf("an absolute check beside comparisons = %+v", p99)
	}
	if an.Score != (analysis.Bands{Pass: 90, Marginal: DefaultScoreMarginal}) || !an.Comparisons() {
		t.Fatalf("score = %+v", an.Score)
	}
	// compare: false is an absolute check.
	an, err = analysisPolicy(t, "checks:\n- {name: s, builtin: success-rate, compare: false}", d)
	if err != nil || an.Checks[0].Compare != nil || an.Comparisons() || an.Score != (analysis.Bands{}) {
		t.Fatalf("compare: false = %+v, %v", an, err)
	}
}

func TestComparisonErrorsNameTheProblem(t *testing.T) {
	d := BuiltinDefaults()
	d.PrometheusURL = "http://p"
	for _, tt := range []struct{ name, doc, want string }{
		{"no revision", "checks:\n- name: a\n  query: sum(rate(x{r=\"{{.Candidate}}\"}[1m]))\n  compare: {direction: increase}", "must name the Revision it measures as {{.Revision}}"},
		{"no direction", "checks:\n- name: a\n  query: sum(x{r=\"{{.Revision}}\"})\n  compare: true", "compare.direction is needed"},
		{"bad direction", "checks:\n- name: a\n  builtin: latency-p99\n  compare: {direction: up}", `compare.direction "up" must be increase`},
		{"bad effect", "checks:\n- name: a\n  builtin: latency-p99\n  compare: {effect: ten}", `checks[0].compare.effect: "ten" must be a number or a percentage`},
		{"negative effect", "checks:\n- name: a\n  builtin: latency-p99\n  compare: {effect: -5%}", "compare.effect -5% must be a finite number of at least 0"},
		{"confidence", "checks:\n- name: a\n  builtin: latency-p99\n  compare: {confidence: 95}", "compare.confidence 95 must be between 0.5 and 0.999"},
		{"too few samples", "checks:\n- name: a\n  builtin: latency-p99\n  window: 1m\n  compare: true", "a window of 1m0s sampled every 30s gives at most 3 samples a side, fewer than minSamples 8"},
		{"min on a comparison", "checks:\n- name: a\n  builtin: latency-p99\n  max: 100\n  compare: true", "min and max do not apply to a comparison"},
		{"limits on a comparison", "checks:\n- name: a\n  builtin: latency-p99\n  failureLimit: 2\n  compare: true", "failureLimit and inconclusiveLimit do not apply"},
		{"weight on an absolute check", "checks:\n- name: a\n  builtin: latency-p99\n  weight: 2", "weight and critical apply to comparison checks"},
		{"unknown compare field", "checks:\n- name: a\n  builtin: latency-p99\n  compare: {directon: increase}", `unknown field "checks[0].compare.directon"; did you mean "checks[0].compare.direction"?`},
		{"score without comparisons", "checks:\n- name: a\n  builtin: latency-p99\nscore: {pass: 90}", "sets a score but has no comparison checks"},
		{"score bands", "checks:\n- name: a\n  builtin: latency-p99\n  compare: true\nscore: {pass: 70, marginal: 80}", "pass 70 and marginal 80 must satisfy"},
		{"zero weight", "checks:\n- name: a\n  builtin: latency-p99\n  compare: true\n  weight: 0", "weight 0 must be above 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := analysisPolicy(t, tt.doc, d)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v does not contain %q", err, tt.want)
			}
		})
	}
}
