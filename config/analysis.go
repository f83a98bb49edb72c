package config

import (
	"bytes"
	"fmt"
	"text/template"
	"time"

	"github.com/sluicehq/sluice/analysis"
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
	// Score bands a round of comparison checks; zero without comparisons.
	Score analysis.Bands `json:"score,omitzero"`
}

// Check is one PromQL query and either the range its value must fall in or,
// with Compare, how the candidate's samples are judged against the stable's.
type Check struct {
	Name string `json:"name"`
	// Builtin names the Knative check the query came from, if any.
	Builtin string `json:"builtin,omitempty"`
	// Query is a text/template of PromQL; see TemplateVars. A comparison's
	// names the Revision it measures as {{.Revision}}.
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
	// Compare makes this a comparison check: Query, rendered for the
	// candidate and for the stable, is sampled every Step over Window, and
	// the two samples are compared. Its failures count in the round's
	// score, not against FailureLimit.
	Compare *analysis.Comparison `json:"compare,omitempty"`
	// Step is a comparison's sample spacing, and its query's {{.Window}}.
	Step time.Duration `json:"step,omitempty"`
	// Weight is a comparison's share of the score.
	Weight float64 `json:"weight,omitempty"`
	// Critical: a comparison whose failure fails the whole round.
	Critical bool `json:"critical,omitempty"`
	// DryRun: measured and shown, never acted on.
	DryRun bool `json:"dryRun,omitempty"`
}

// Comparisons reports whether the analysis has comparison checks.
func (a *Analysis) Comparisons() bool {
	if a == nil {
		return false
	}
	for _, c := range a.Checks {
		if c.Compare != nil {
			return true
		}
	}
	return false
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
// `{{.Namespace}}` or `{{.Revision}}`.
type TemplateVars struct {
	Namespace     string
	Service       string
	Configuration string
	Candidate     string
	Stable        string
	// Revision is the Revision measured: the candidate, or for a
	// comparison each of the candidate and the stable in turn.
	Revision string
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
