package config

import (
	"slices"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/analysis"
)

// Built-in checks over the request metrics Knative's queue-proxy exports per
// Revision. Latencies are in milliseconds, success rates from 0 to 1.
const (
	BuiltinSuccessRate = "success-rate"
	BuiltinLatencyP50  = "latency-p50"
	BuiltinLatencyP95  = "latency-p95"
	BuiltinLatencyP99  = "latency-p99"
	// BuiltinLatencyMean is the mean latency: exact, where a quantile is
	// interpolated inside a histogram bucket.
	BuiltinLatencyMean = "latency-mean"
)

// Knative has exported queue-proxy metrics under two sets of names; a
// policy's knativeMetrics (or the worker's SLUICE_KNATIVE_METRICS) says
// which its Prometheus holds.
const (
	// MetricsOpenTelemetry: recent Knative Serving releases, among them the
	// one sluice is built against: kn_serving_invocation_duration_seconds,
	// labelled http_response_status_code only. The Revision and namespace
	// are OpenTelemetry resource attributes, which the queue-proxy exports
	// on a target_info series of the same scrape target; the built-ins join
	// on it, or read kn_revision_name from the series themselves where a
	// collector copied the attributes onto them.
	MetricsOpenTelemetry = "opentelemetry"
	// MetricsOpenCensus: earlier releases: revision_request_count and
	// revision_request_latencies (ms), labelled namespace_name,
	// revision_name, response_code_class.
	MetricsOpenCensus = "opencensus"
)

type builtin struct {
	query, series, metric string
	min, max              *float64
	// compare is how a comparison judges this metric unless told.
	compare analysis.Comparison
}

// flavour is how one set of metric names is queried for the candidate.
type flavour struct {
	// metric names the request series in messages; count, sum and bucket
	// are the histogram's series.
	metric, count, sum, bucket string
	// scoped returns one aggregation of the candidate's rate of series s
	// (with matchers m, may be empty), aggregated by agg ("sum", "sum by
	// (le)"), in every form this flavour keeps the Revision in.
	scoped func(agg, s, m string) string
	// serverError matches the series of 5xx answers.
	serverError string
	// series counts the candidate's series of any kind, for "no data".
	series string
	// toMillis turns the histogram's unit into milliseconds.
	toMillis string
}

// The measured Revision's labels: OpenTelemetry's resource attributes (on
// target_info, or copied onto each series), and OpenCensus's labels.
const (
	otelRevision   = `k8s_namespace_name="{{.Namespace}}",kn_revision_name="{{.Revision}}"`
	otelTarget     = `target_info{` + otelRevision + `}`
	censusRevision = `namespace_name="{{.Namespace}}",revision_name="{{.Revision}}"`
)

// selector is series s with matchers ms (empty ones skipped).
func selector(s string, ms ...string) string {
	ms = slices.DeleteFunc(ms, func(m string) bool { return m == "" })
	if len(ms) == 0 {
		return s
	}
	return s + "{" + strings.Join(ms, ",") + "}"
}

// aggRate is agg over the rate of the series sel, in the check's window.
func aggRate(agg, sel string) string { return agg + ` (rate(` + sel + `[{{.Window}}]))` }

var flavours = map[string]flavour{
	MetricsOpenTelemetry: {
		metric: "kn_serving_invocation_duration_seconds",
		count:  "kn_serving_invocation_duration_seconds_count", sum: "kn_serving_invocation_duration_seconds_sum",
		bucket: "kn_serving_invocation_duration_seconds_bucket",
		scoped: func(agg, s, m string) string {
			// max by (job, instance): one target_info per scrape target even
			// while a pod's address is reused and the old pod's series has
			// not yet gone stale; without it the join fails ("matching
			// labels must be unique on one side").
			return agg + ` (rate(` + selector(s, m) + `[{{.Window}}]) * on (job, instance) group_left () max by (job, instance) (` + otelTarget + `))` +
				` or ` + aggRate(agg, selector(s, otelRevision, m))
		},
		serverError: `http_response_status_code=~"5.."`,
		series:      `count(` + otelTarget + `) or count(` + selector("kn_serving_invocation_duration_seconds_count", otelRevision) + `)`,
		toMillis:    "1000 * ",
	},
	MetricsOpenCensus: {
		metric: "revision_request_count",
		count:  "revision_request_count", sum: "revision_request_latencies_sum", bucket: "revision_request_latencies_bucket",
		scoped: func(agg, s, m string) string {
			return aggRate(agg, selector(s, censusRevision, m))
		},
		serverError: `response_code_class="5xx"`,
		series:      `count(` + selector("revision_request_count", censusRevision) + `)`,
	},
}

// builtinFor returns a built-in check's query and default range for a set of
// metric names.
func builtinFor(metrics, name string) (builtin, bool) {
	f, ok := flavours[metrics]
	if !ok {
		return builtin{}, false
	}
	count, bucket := f.count, f.bucket
	b := builtin{series: f.series, metric: f.metric}
	// A comparison of latency fails on a rise of more than a tenth of the
	// stable's; of success rate, on a fall of more than half a point.
	slower := analysis.Comparison{Direction: analysis.Increase, Effect: analysis.Effect{Value: 10, Relative: true}}
	latency := func(q string) builtin {
		b.query, b.max = f.toMillis+`histogram_quantile(`+q+`, `+f.scoped("sum by (le)", bucket, "")+`)`, new(500.0)
		b.compare = slower
		return b
	}
	switch name {
	case BuiltinSuccessRate:
		// One minus the share of the Revision's requests that answered
		// 5xx. No 5xx series at all means none failed (vector(0)); no
		// requests at all is no data.
		b.query = `1 - ((` + f.scoped("sum", count, f.serverError) + ` or vector(0)) / (` + f.scoped("sum", count, "") + `))`
		b.min = new(0.99)
		b.compare = analysis.Comparison{Direction: analysis.Decrease, Effect: analysis.Effect{Value: 0.005}}
		return b, true
	case BuiltinLatencyMean:
		// Time spent over requests served; no requests is 0/0, no data.
		// Each side in parentheses: "or" binds more loosely than "/".
		b.query, b.max = f.toMillis+`((`+f.scoped("sum", f.sum, "")+`) / (`+f.scoped("sum", count, "")+`))`, new(500.0)
		b.compare = slower
		return b, true
	case BuiltinLatencyP50:
		return latency("0.5"), true
	case BuiltinLatencyP95:
		return latency("0.95"), true
	case BuiltinLatencyP99:
		return latency("0.99"), true
	}
	return builtin{}, false
}

// BuiltinChecks lists the built-in check names, sorted.
func BuiltinChecks() []string {
	return []string{BuiltinLatencyMean, BuiltinLatencyP50, BuiltinLatencyP95, BuiltinLatencyP99, BuiltinSuccessRate}
}

// KnativeMetrics lists the accepted knativeMetrics values.
func KnativeMetrics() []string {
	names := make([]string, 0, len(flavours))
	for n := range flavours {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
