// Package analysis judges a candidate Revision: measurements and their
// results, comparisons of candidate and stable, the round's score, and the
// tallies the workflow decides on. It does no I/O (package measure takes
// the measurements) and reads no clock, so the workflow can use it
// deterministically.
package analysis

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Result is how one measurement came out.
type Result string

const (
	// Passed: the value was in range, or the webhook answered 2xx.
	Passed Result = "Passed"
	// Failed: the value was out of range, or the webhook did not answer 2xx.
	Failed Result = "Failed"
	// Inconclusive: the query returned no data.
	Inconclusive Result = "Inconclusive"
	// Error: the query could not be run (Prometheus unreachable, bad PromQL).
	Error Result = "Error"
	// Marginal: a round's score between its marginal and pass bands.
	Marginal Result = "Marginal"
)

// Kinds of measurement.
const (
	KindCheck   = "check"
	KindWebhook = "webhook"
	// KindCompare is a comparison check: candidate against stable.
	KindCompare = "compare"
	// KindScore is a round's score over its comparison checks.
	KindScore = "score"
)

// Measurement is one check's or webhook's outcome at one moment. Every
// measurement is an activity result, so it stays in the rollout's history.
type Measurement struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Moment string `json:"moment,omitempty"`
	// Step is the step (from 1) the rollout was at, 0 before the first.
	Step   int      `json:"step"`
	Weight int64    `json:"weight"`
	Result Result   `json:"result"`
	Value  *float64 `json:"value,omitempty"`
	Min    *float64 `json:"min,omitempty"`
	Max    *float64 `json:"max,omitempty"`
	// StatusCode is a webhook's last HTTP status, 0 if none came.
	StatusCode int       `json:"statusCode,omitempty"`
	Attempts   int       `json:"attempts,omitempty"`
	Message    string    `json:"message,omitempty"`
	At         time.Time `json:"at"`
	// Compare holds a comparison's samples' summaries and test figures.
	Compare *CompareResult `json:"compare,omitempty"`
	// DryRun: this check is measured and shown, never acted on.
	DryRun bool `json:"dryRun,omitempty"`
}

// Evaluate judges value against [min, max]; a nil bound is open. A nil or
// NaN value (no data, or 0/0 when nothing was requested) is inconclusive.
func Evaluate(value, min, max *float64) Result {
	if value == nil || math.IsNaN(*value) {
		return Inconclusive
	}
	if (min != nil && *value < *min) || (max != nil && *value > *max) {
		return Failed
	}
	return Passed
}

// Range renders the pass range, e.g. "[0.99, ∞)".
func Range(min, max *float64) string {
	lo, hi := "-∞", "∞"
	if min != nil {
		lo = FormatValue(*min)
	}
	if max != nil {
		hi = FormatValue(*max)
	}
	return "[" + lo + ", " + hi + "]"
}

// FormatValue prints a measured value briefly: up to 4 significant digits.
func FormatValue(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// Summary is one line about m for a person: "success-rate 0.8 Failed (range
// [0.99, ∞])".
func (m Measurement) Summary() string {
	s := m.summary()
	if m.DryRun {
		s += " (dry run)"
	}
	return s
}

func (m Measurement) summary() string {
	switch {
	case m.Kind == KindScore && m.Value != nil:
		return fmt.Sprintf("score %s %s (pass ≥ %s, marginal ≥ %s)", FormatValue(*m.Value), m.Result, FormatValue(ptrOr(m.Max)), FormatValue(ptrOr(m.Min)))
	case m.Compare != nil && (m.Result == Passed || m.Result == Failed):
		c := m.Compare
		return fmt.Sprintf("%s %s: candidate median %s vs stable %s, shift %s %s (allowed %s, p=%s, n=%d/%d)",
			m.Name, m.Result, FormatValue(c.Candidate.Median), FormatValue(c.Stable.Median), FormatValue(c.Shift),
			c.Interval(), FormatValue(c.Allowed), FormatValue(c.P), c.Candidate.Count, c.Stable.Count)
	case m.Kind == KindWebhook && m.StatusCode != 0:
		return fmt.Sprintf("webhook %s: HTTP %d %s", m.Name, m.StatusCode, m.Result)
	case m.Kind == KindWebhook:
		return fmt.Sprintf("webhook %s: %s: %s", m.Name, m.Result, m.Message)
	case m.Value != nil:
		return fmt.Sprintf("%s = %s %s (range %s)", m.Name, FormatValue(*m.Value), m.Result, Range(m.Min, m.Max))
	}
	return fmt.Sprintf("%s %s: %s", m.Name, m.Result, m.Message)
}

func ptrOr(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}
