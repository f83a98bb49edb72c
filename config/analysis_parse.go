package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/analysis"
)

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
	Score          *scoreDoc    `json:"score"`
}

type scoreDoc struct {
	Pass     *float64 `json:"pass"`
	Marginal *float64 `json:"marginal"`
}

type checkDoc struct {
	Name                  string      `json:"name"`
	Builtin               string      `json:"builtin"`
	Query                 string      `json:"query"`
	Min                   *float64    `json:"min"`
	Max                   *float64    `json:"max"`
	Window                string      `json:"window"`
	FailureLimit          *int        `json:"failureLimit"`
	ConsecutiveErrorLimit *int        `json:"consecutiveErrorLimit"`
	InconclusiveLimit     *int        `json:"inconclusiveLimit"`
	Compare               *compareDoc `json:"compare"`
	Weight                *float64    `json:"weight"`
	Critical              bool        `json:"critical"`
	DryRun                bool        `json:"dryRun"`
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
	dec, ok := decodeDocument(raw, &doc, "an analysis document (docs/analysis.md), a mapping")
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Message: fmt.Sprintf(format, args...), Value: shorten(raw)})
	}
	for _, p := range dec.problems {
		fail("%s", p)
	}
	if !ok {
		return nil, errors.Join(errs...)
	}
	an := &Analysis{Interval: DefaultAnalysisInterval, KnativeMetrics: cmp.Or(d.KnativeMetrics, MetricsOpenTelemetry)}
	if doc.KnativeMetrics != "" {
		an.KnativeMetrics = doc.KnativeMetrics
	}
	// Built-ins are resolved with known names even when knativeMetrics is
	// wrong, so its one mistake is reported once.
	flavour := an.KnativeMetrics
	if _, ok := flavours[flavour]; !ok {
		fail("knativeMetrics %q must be one of %s", an.KnativeMetrics, strings.Join(KnativeMetrics(), ", "))
		flavour = MetricsOpenTelemetry
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
	if len(doc.Checks) == 0 && len(doc.Webhooks) == 0 && !dec.broken("checks") && !dec.broken("webhooks") {
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
		if dec.broken(fmt.Sprintf("checks[%d]", i)) {
			continue // reported as it was read; judging the rest would guess
		}
		ch := Check{Name: name("check", i, c.Name), Window: window, ConsecutiveErrorLimit: DefaultConsecutiveErrorLimit, InconclusiveLimit: DefaultInconclusiveLimit}
		compare := c.Compare != nil && !c.Compare.off
		var b builtin
		switch {
		case c.Builtin != "" && c.Query != "":
			fail("check %q sets both builtin and query; use one", c.Name)
		case c.Builtin != "":
			if !slices.Contains(BuiltinChecks(), c.Builtin) {
				fail("check %q: builtin %q is unknown; use one of %s", c.Name, c.Builtin, strings.Join(BuiltinChecks(), ", "))
				continue
			}
			// Empty only when knativeMetrics is unknown, which is reported above.
			b, _ = builtinFor(flavour, c.Builtin)
			ch.Builtin, ch.Query, ch.Series, ch.Metric = c.Builtin, b.query, b.series, b.metric
			if !compare {
				ch.Min, ch.Max = b.min, b.max
			}
		case strings.TrimSpace(c.Query) != "":
			ch.Query = strings.TrimSpace(c.Query)
		default:
			fail("check %q needs a query (PromQL) or a builtin (%s)", c.Name, strings.Join(BuiltinChecks(), ", "))
			continue
		}
		if c.Min != nil || c.Max != nil {
			ch.Min, ch.Max = c.Min, c.Max
		}
		ch.DryRun = c.DryRun
		seconds(fmt.Sprintf("check %q: window", c.Name), c.Window, &ch.Window)
		limit(fail, c.Name, "consecutiveErrorLimit", c.ConsecutiveErrorLimit, &ch.ConsecutiveErrorLimit)
		if compare {
			comparison(fail, &ch, c, b)
		} else {
			absolute(fail, &ch, c)
		}
		// Expand the template once with sample values, so a typo like
		// {{.Canidate}} is an error now and not at the first step.
		if _, err := RenderQuery(ch.Query, TemplateVars{}); err != nil {
			fail("check %q: query is not a valid template (variables: .Namespace .Service .Configuration .Candidate .Stable .Revision .Window .Weight): %v", c.Name, err)
		}
		an.Checks = append(an.Checks, ch)
	}
	if doc.Score != nil && !an.Comparisons() && !dec.broken("checks") {
		fail("sets a score but has no comparison checks; the score bands judge comparisons (compare:)")
	}
	if an.Comparisons() {
		an.Score = analysis.Bands{Pass: DefaultScorePass, Marginal: DefaultScoreMarginal}
		if doc.Score != nil && doc.Score.Pass != nil {
			an.Score.Pass = *doc.Score.Pass
		}
		if doc.Score != nil && doc.Score.Marginal != nil {
			an.Score.Marginal = *doc.Score.Marginal
		}
		if b := an.Score; b.Marginal < 0 || b.Pass > 100 || b.Marginal > b.Pass {
			fail("score: pass %g and marginal %g must satisfy 0 ≤ marginal ≤ pass ≤ 100", b.Pass, b.Marginal)
		}
	}
	if len(an.Checks) > 0 {
		an.Prometheus = d.PrometheusURL
		if doc.Prometheus != "" {
			an.Prometheus = doc.Prometheus
		}
		if an.Prometheus == "" && !dec.broken("prometheus") {
			fail("has checks but no Prometheus to query; set prometheus: in the document or SLUICE_PROMETHEUS_URL on the worker")
		} else if err := CheckURL(an.Prometheus); err != nil {
			fail("prometheus %q: %v", an.Prometheus, err)
		}
	}
	for i, h := range doc.Webhooks {
		if dec.broken(fmt.Sprintf("webhooks[%d]", i)) {
			continue
		}
		wh := Webhook{Name: name("webhook", i, h.Name), At: Moment(h.At), URL: h.URL, Timeout: DefaultWebhookTimeout, Retries: DefaultWebhookRetries, Metadata: h.Metadata}
		if !knownMoment(wh.At) {
			fail("webhook %q: at %q must be one of %s", h.Name, h.At, joinMoments())
		}
		if err := CheckURL(h.URL); err != nil {
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

// absolute checks what only a check against a fixed range may set.
func absolute(fail func(string, ...any), ch *Check, c checkDoc) {
	if ch.Min == nil && ch.Max == nil {
		fail("check %q has no min and no max, so it could never fail; set at least one", c.Name)
	}
	if ch.Min != nil && ch.Max != nil && *ch.Min > *ch.Max {
		fail("check %q: min %g is above max %g, so it could never pass", c.Name, *ch.Min, *ch.Max)
	}
	for _, v := range []*float64{ch.Min, ch.Max} {
		if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
			fail("check %q: min and max must be finite numbers", c.Name)
		}
	}
	if c.Weight != nil || c.Critical {
		fail("check %q: weight and critical apply to comparison checks (compare:); a check against min and max rolls back on its own", c.Name)
	}
	limit(fail, c.Name, "failureLimit", c.FailureLimit, &ch.FailureLimit)
	limit(fail, c.Name, "inconclusiveLimit", c.InconclusiveLimit, &ch.InconclusiveLimit)
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

// CheckURL accepts an absolute http:// or https:// URL: where sluice sends requests.
func CheckURL(raw string) error {
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
