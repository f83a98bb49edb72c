package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"sigs.k8s.io/yaml"
)

// AnnotationAnalysis holds the rollout's checks and webhooks as a YAML (or
// JSON) document; see docs/analysis.md.
const AnnotationAnalysis = Prefix + "analysis"

// Analysis is the validated analysis of a policy: metric checks run at an
// interval during each hold and once more before a step ends, and webhooks
// called at fixed moments of the rollout.
type Analysis struct {
	Interval time.Duration `json:"interval"`
	// Prometheus is the base URL of the Prometheus HTTP API the checks query.
	Prometheus string `json:"prometheus,omitempty"`
	// KnativeMetrics names the queue-proxy metrics the built-ins query.
	KnativeMetrics string    `json:"knativeMetrics,omitempty"`
	Checks         []Check   `json:"checks,omitempty"`
	Webhooks       []Webhook `json:"webhooks,omitempty"`
}

// Check is one PromQL query and the range its value must fall in.
type Check struct {
	Name string `json:"name"`
	// Builtin names the Knative check the query came from, if any.
	Builtin string `json:"builtin,omitempty"`
	// Query is a text/template of PromQL; see TemplateVars.
	Query string `json:"query"`
	// Series, for a built-in, counts the candidate's series of Metric (a
	// template like Query): when Query finds no data, it tells "nothing
	// scraped" from "no requests".
	Series string   `json:"series,omitempty"`
	Metric string   `json:"metric,omitempty"`
	Min    *float64 `json:"min,omitempty"`
	Max    *float64 `json:"max,omitempty"`
	// Window is the range the query looks back over ({{.Window}}).
	Window time.Duration `json:"window"`
	// FailureLimit is how many failed measurements are tolerated; one more
	// rolls back.
	FailureLimit int `json:"failureLimit"`
	// ConsecutiveErrorLimit is how many query errors in a row are tolerated;
	// one more pauses the rollout. Errors are not failures.
	ConsecutiveErrorLimit int `json:"consecutiveErrorLimit"`
	// InconclusiveLimit is how many measurements without data in a row are
	// tolerated; one more pauses the rollout.
	InconclusiveLimit int `json:"inconclusiveLimit"`
}

// Moment is when a webhook is called.
type Moment string

const (
	// MomentBeforeStart runs once the candidate is Ready, before it gets any
	// traffic; a failure rolls back.
	MomentBeforeStart Moment = "before-start"
	// MomentHold runs with the checks at every analysis round of a hold; a
	// failure counts like a failed check.
	MomentHold Moment = "hold"
	// MomentGate runs before the last step (promotion to 100%); the rollout
	// waits, asking again each interval, until every gate hook answers 2xx.
	MomentGate Moment = "gate"
	// MomentAfterEnd runs once the rollout has ended, whatever the outcome
	// (except superseded); its answer is recorded, not acted on.
	MomentAfterEnd Moment = "after-end"
	// MomentRollback runs after traffic went back to the stable Revision;
	// its answer is recorded, not acted on.
	MomentRollback Moment = "rollback"
)

var moments = []Moment{MomentBeforeStart, MomentHold, MomentGate, MomentAfterEnd, MomentRollback}

// Webhook is one HTTP POST of sluice's JSON payload.
type Webhook struct {
	Name     string            `json:"name"`
	At       Moment            `json:"at"`
	URL      string            `json:"url"`
	Timeout  time.Duration     `json:"timeout"`
	Retries  int               `json:"retries"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// FailureLimit applies to hold hooks as to checks.
	FailureLimit int `json:"failureLimit"`
}

// Hooks returns the webhooks called at m, in policy order.
func (a *Analysis) Hooks(m Moment) []Webhook {
	if a == nil {
		return nil
	}
	var out []Webhook
	for _, h := range a.Webhooks {
		if h.At == m {
			out = append(out, h)
		}
	}
	return out
}

// Analyses reports whether a hold has anything to run: checks or hold hooks.
func (a *Analysis) Analyses() bool {
	return a != nil && (len(a.Checks) > 0 || len(a.Hooks(MomentHold)) > 0)
}

// TemplateVars are the variables a check's query may use, e.g.
// `{{.Namespace}}` or `{{.Candidate}}`.
type TemplateVars struct {
	Namespace     string
	Service       string
	Configuration string
	Candidate     string
	Stable        string
	// Window is the check's window in PromQL form, e.g. "30s".
	Window string
	// Weight is the candidate's current traffic share, in percent.
	Weight int64
}

// PromDuration renders d as a PromQL duration in whole seconds ("90s"),
// never less than one second.
func PromDuration(d time.Duration) string {
	return fmt.Sprintf("%ds", max(int64(d/time.Second), 1))
}

// RenderQuery expands a check's query with vars.
func RenderQuery(query string, vars TemplateVars) (string, error) {
	t, err := template.New("query").Option("missingkey=error").Parse(query)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, vars); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Built-in checks over the request metrics Knative's queue-proxy exports per
// Revision. Latencies are in milliseconds, success rates from 0 to 1.
const (
	BuiltinSuccessRate = "success-rate"
	BuiltinLatencyP50  = "latency-p50"
	BuiltinLatencyP95  = "latency-p95"
	BuiltinLatencyP99  = "latency-p99"
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
}

func ptr(f float64) *float64 { return &f }

// flavour is how one set of metric names is queried for the candidate.
type flavour struct {
	// metric names the request series in messages; count and bucket are
	// the histogram's series.
	metric, count, bucket string
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

// The candidate's labels: OpenTelemetry's resource attributes (on
// target_info, or copied onto each series), and OpenCensus's labels.
const (
	otelRevision   = `k8s_namespace_name="{{.Namespace}}",kn_revision_name="{{.Candidate}}"`
	otelTarget     = `target_info{` + otelRevision + `}`
	censusRevision = `namespace_name="{{.Namespace}}",revision_name="{{.Candidate}}"`
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
		count:  "kn_serving_invocation_duration_seconds_count", bucket: "kn_serving_invocation_duration_seconds_bucket",
		scoped: func(agg, s, m string) string {
			return agg + ` (rate(` + selector(s, m) + `[{{.Window}}]) * on (job, instance) group_left () ` + otelTarget + `)` +
				` or ` + aggRate(agg, selector(s, otelRevision, m))
		},
		serverError: `http_response_status_code=~"5.."`,
		series:      `count(` + otelTarget + `) or count(` + selector("kn_serving_invocation_duration_seconds_count", otelRevision) + `)`,
		toMillis:    "1000 * ",
	},
	MetricsOpenCensus: {
		metric: "revision_request_count",
		count:  "revision_request_count", bucket: "revision_request_latencies_bucket",
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
	latency := func(q string) builtin {
		b.query, b.max = f.toMillis+`histogram_quantile(`+q+`, `+f.scoped("sum by (le)", bucket, "")+`)`, ptr(500)
		return b
	}
	switch name {
	case BuiltinSuccessRate:
		// One minus the share of the candidate's requests that answered
		// 5xx. No 5xx series at all means none failed (vector(0)); no
		// requests at all is no data.
		b.query = `1 - ((` + f.scoped("sum", count, f.serverError) + ` or vector(0)) / (` + f.scoped("sum", count, "") + `))`
		b.min = ptr(0.99)
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
	return []string{BuiltinLatencyP50, BuiltinLatencyP95, BuiltinLatencyP99, BuiltinSuccessRate}
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

// Analysis defaults.
const (
	DefaultAnalysisInterval      = 30 * time.Second
	DefaultConsecutiveErrorLimit = 4
	// DefaultInconclusiveLimit tolerates one round without data: right after
	// a step, a series may not have two samples in its window yet.
	DefaultInconclusiveLimit = 1
	// minDefaultWindow keeps the default window long enough for rate() to
	// find two samples at the usual scrape intervals (15s to 30s).
	minDefaultWindow      = time.Minute
	DefaultWebhookTimeout = 10 * time.Second
	DefaultWebhookRetries = 2
	maxChecks             = 10
	maxWebhooks           = 10
	maxRetries            = 10
)

// analysisDoc is the annotation as written: durations as text, so that each
// mistake can be reported with the value found.
type analysisDoc struct {
	Interval       string       `json:"interval"`
	Window         string       `json:"window"`
	Prometheus     string       `json:"prometheus"`
	KnativeMetrics string       `json:"knativeMetrics"`
	Checks         []checkDoc   `json:"checks"`
	Webhooks       []webhookDoc `json:"webhooks"`
}

type checkDoc struct {
	Name                  string   `json:"name"`
	Builtin               string   `json:"builtin"`
	Query                 string   `json:"query"`
	Min                   *float64 `json:"min"`
	Max                   *float64 `json:"max"`
	Window                string   `json:"window"`
	FailureLimit          *int     `json:"failureLimit"`
	ConsecutiveErrorLimit *int     `json:"consecutiveErrorLimit"`
	InconclusiveLimit     *int     `json:"inconclusiveLimit"`
}

type webhookDoc struct {
	Name         string            `json:"name"`
	At           string            `json:"at"`
	URL          string            `json:"url"`
	Timeout      string            `json:"timeout"`
	Retries      *int              `json:"retries"`
	Metadata     map[string]string `json:"metadata"`
	FailureLimit *int              `json:"failureLimit"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// parseAnalysis reads the analysis annotation. d gives the worker's default
// Prometheus URL and metric names, used when the document names none.
func parseAnalysis(raw string, d Defaults) (*Analysis, error) {
	key := AnnotationAnalysis
	var doc analysisDoc
	if err := yaml.UnmarshalStrict([]byte(raw), &doc); err != nil {
		msg := err.Error()
		for _, noise := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
			msg = strings.ReplaceAll(msg, noise, "")
		}
		return nil, &FieldError{Key: key, Message: "is not a valid analysis document (see docs/analysis.md): " + msg, Value: shorten(raw)}
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Message: fmt.Sprintf(format, args...), Value: shorten(raw)})
	}
	an := &Analysis{Interval: DefaultAnalysisInterval, KnativeMetrics: cmp.Or(d.KnativeMetrics, MetricsOpenTelemetry)}
	if doc.KnativeMetrics != "" {
		an.KnativeMetrics = doc.KnativeMetrics
	}
	if _, ok := flavours[an.KnativeMetrics]; !ok {
		fail("knativeMetrics %q must be one of %s", an.KnativeMetrics, strings.Join(KnativeMetrics(), ", "))
	}
	// seconds reads a duration of at least a second into *into, if raw is set.
	seconds := func(what, raw string, into *time.Duration) {
		if raw == "" {
			return
		}
		v, err := time.ParseDuration(raw)
		if err != nil || v < time.Second {
			fail("%s %q must be a duration of at least 1s, e.g. \"30s\" or \"1m\"", what, raw)
			return
		}
		*into = v
	}
	seconds("interval", doc.Interval, &an.Interval)
	window := max(an.Interval, minDefaultWindow)
	seconds("window", doc.Window, &window)
	if len(doc.Checks) == 0 && len(doc.Webhooks) == 0 {
		fail("lists no checks and no webhooks; add one or remove the annotation")
	}
	if len(doc.Checks) > maxChecks || len(doc.Webhooks) > maxWebhooks {
		fail("has %d checks and %d webhooks; at most %d of each are allowed", len(doc.Checks), len(doc.Webhooks), maxChecks)
	}
	names := map[string]bool{}
	name := func(kind string, i int, n string) string {
		switch {
		case n == "":
			fail("%s %d has no name; give each a short name like \"success-rate\"", kind, i+1)
		case !nameRE.MatchString(n) || len(n) > 63:
			fail("%s name %q must be lower-case letters, digits and dashes", kind, n)
		case names[n]:
			fail("name %q is used twice; names must be unique across checks and webhooks", n)
		}
		names[n] = true
		return n
	}
	for i, c := range doc.Checks {
		ch := Check{Name: name("check", i, c.Name), Window: window, ConsecutiveErrorLimit: DefaultConsecutiveErrorLimit, InconclusiveLimit: DefaultInconclusiveLimit}
		switch {
		case c.Builtin != "" && c.Query != "":
			fail("check %q sets both builtin and query; use one", c.Name)
		case c.Builtin != "":
			if !slices.Contains(BuiltinChecks(), c.Builtin) {
				fail("check %q: builtin %q is unknown; use one of %s", c.Name, c.Builtin, strings.Join(BuiltinChecks(), ", "))
				continue
			}
			// Empty only when knativeMetrics is unknown, which is reported above.
			b, _ := builtinFor(an.KnativeMetrics, c.Builtin)
			ch.Builtin, ch.Query, ch.Series, ch.Metric, ch.Min, ch.Max = c.Builtin, b.query, b.series, b.metric, b.min, b.max
			if c.Min != nil || c.Max != nil {
				ch.Min, ch.Max = c.Min, c.Max
			}
		case strings.TrimSpace(c.Query) != "":
			ch.Query = strings.TrimSpace(c.Query)
			ch.Min, ch.Max = c.Min, c.Max
			if ch.Min == nil && ch.Max == nil {
				fail("check %q has no min and no max, so it could never fail; set at least one", c.Name)
			}
		default:
			fail("check %q needs a query (PromQL) or a builtin (%s)", c.Name, strings.Join(BuiltinChecks(), ", "))
			continue
		}
		if ch.Min != nil && ch.Max != nil && *ch.Min > *ch.Max {
			fail("check %q: min %g is above max %g, so it could never pass", c.Name, *ch.Min, *ch.Max)
		}
		for _, v := range []*float64{ch.Min, ch.Max} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				fail("check %q: min and max must be finite numbers", c.Name)
			}
		}
		seconds(fmt.Sprintf("check %q: window", c.Name), c.Window, &ch.Window)
		limit(fail, c.Name, "failureLimit", c.FailureLimit, &ch.FailureLimit)
		limit(fail, c.Name, "consecutiveErrorLimit", c.ConsecutiveErrorLimit, &ch.ConsecutiveErrorLimit)
		limit(fail, c.Name, "inconclusiveLimit", c.InconclusiveLimit, &ch.InconclusiveLimit)
		// Expand the template once with sample values, so a typo like
		// {{.Canidate}} is an error now and not at the first step.
		if _, err := RenderQuery(ch.Query, TemplateVars{}); err != nil {
			fail("check %q: query is not a valid template (variables: .Namespace .Service .Configuration .Candidate .Stable .Window .Weight): %v", c.Name, err)
		}
		an.Checks = append(an.Checks, ch)
	}
	if len(an.Checks) > 0 {
		an.Prometheus = d.PrometheusURL
		if doc.Prometheus != "" {
			an.Prometheus = doc.Prometheus
		}
		if an.Prometheus == "" {
			fail("has checks but no Prometheus to query; set prometheus: in the document or %s on the worker", EnvPrometheusURL)
		} else if err := checkURL(an.Prometheus); err != nil {
			fail("prometheus %q: %v", an.Prometheus, err)
		}
	}
	for i, h := range doc.Webhooks {
		wh := Webhook{Name: name("webhook", i, h.Name), At: Moment(h.At), URL: h.URL, Timeout: DefaultWebhookTimeout, Retries: DefaultWebhookRetries, Metadata: h.Metadata}
		if !knownMoment(wh.At) {
			fail("webhook %q: at %q must be one of %s", h.Name, h.At, joinMoments())
		}
		if err := checkURL(h.URL); err != nil {
			fail("webhook %q: url %q: %v", h.Name, h.URL, err)
		}
		if h.Timeout != "" {
			if v, err := time.ParseDuration(h.Timeout); err != nil || v <= 0 || v > 5*time.Minute {
				fail("webhook %q: timeout %q must be a positive duration of at most 5m", h.Name, h.Timeout)
			} else {
				wh.Timeout = v
			}
		}
		limit(fail, h.Name, "retries", h.Retries, &wh.Retries)
		limit(fail, h.Name, "failureLimit", h.FailureLimit, &wh.FailureLimit)
		if wh.Retries > maxRetries {
			fail("webhook %q: retries %d is more than %d", h.Name, wh.Retries, maxRetries)
		}
		an.Webhooks = append(an.Webhooks, wh)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return an, nil
}

func limit(fail func(string, ...any), name, field string, v *int, into *int) {
	if v == nil {
		return
	}
	if *v < 0 {
		fail("%q: %s %d must not be negative", name, field, *v)
		return
	}
	*into = *v
}

func knownMoment(m Moment) bool {
	for _, k := range moments {
		if m == k {
			return true
		}
	}
	return false
}

func joinMoments() string {
	parts := make([]string, len(moments))
	for i, m := range moments {
		parts[i] = string(m)
	}
	return strings.Join(parts, ", ")
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an absolute http:// or https:// URL")
	}
	return nil
}

// shorten keeps error messages readable when a long document is quoted.
func shorten(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
