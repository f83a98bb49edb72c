package analysis

import "fmt"

// Limits are how many bad measurements of one check are tolerated before
// the rollout acts; one more than the limit acts.
type Limits struct {
	Failure          int `json:"failure"`
	ConsecutiveError int `json:"consecutiveError"`
	Inconclusive     int `json:"inconclusive"`
}

// Tally is one check's (or hold webhook's) record over a rollout.
type Tally struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Limits Limits `json:"limits"`
	// DryRun tallies are shown, never acted on.
	DryRun            bool `json:"dryRun,omitempty"`
	Measured          int  `json:"measured"`
	Passed            int  `json:"passed"`
	Failures          int  `json:"failures"`
	Errors            int  `json:"errors"`
	ConsecutiveErrors int  `json:"consecutiveErrors"`
	Inconclusives     int  `json:"inconclusives"`
	// ConsecutiveInconclusives is the current run of measurements without
	// data; the inconclusive limit applies to it.
	ConsecutiveInconclusives int          `json:"consecutiveInconclusives"`
	Last                     *Measurement `json:"last,omitempty"`
}

// Record counts m. A measurement of another kind ends a run of errors or of
// measurements without data.
func (t *Tally) Record(m Measurement) {
	t.Measured++
	switch m.Result {
	case Passed:
		t.Passed++
	case Failed, Marginal:
		t.Failures++
	case Inconclusive:
		t.Inconclusives++
		t.ConsecutiveInconclusives++
	case Error:
		t.Errors++
		t.ConsecutiveErrors++
	}
	if m.Result != Error {
		t.ConsecutiveErrors = 0
	}
	if m.Result != Inconclusive {
		t.ConsecutiveInconclusives = 0
	}
	last := m
	t.Last = &last
}

// Forgive clears what paused the rollout once a person resumes it: the runs
// of errors and of measurements without data. Failures stay: they are the
// candidate's.
func (t *Tally) Forgive() {
	t.ConsecutiveErrors, t.ConsecutiveInconclusives = 0, 0
}

// Action is what the rollout does after a round of measurements.
type Action string

const (
	Continue Action = "Continue"
	Pause    Action = "Pause"
	Rollback Action = "Rollback"
)

// Decision is an Action and why.
type Decision struct {
	Action Action
	Reason string
}

// Judge decides over the tallies, in their order; dry-run ones are left
// out. A check or hold webhook past its failure limit, or a failed round
// score, rolls back (before anything else is considered). Otherwise a run
// of errors, or of a check's measurements without data, past its limit
// pauses, as does a marginal score — and a score without a verdict at a
// step's closing round (final): earlier rounds of a hold may lack data
// that the hold's end will have.
func Judge(tallies []Tally, final bool) Decision {
	var acting []Tally
	for _, t := range tallies {
		if !t.DryRun {
			acting = append(acting, t)
		}
	}
	for _, t := range acting {
		switch {
		case t.Kind == KindScore && t.Last != nil && t.Last.Result == Failed:
			return Decision{Rollback, "analysis: the comparison score failed: " + lastSummary(t) + ": " + t.Last.Message}
		case t.Kind != KindScore && t.Kind != KindCompare && t.Failures > t.Limits.Failure:
			return Decision{Rollback, fmt.Sprintf("analysis: %s failed %s (failure limit %d); last: %s",
				t.Name, times(t.Failures), t.Limits.Failure, lastSummary(t))}
		}
	}
	for _, t := range acting {
		if t.ConsecutiveErrors > t.Limits.ConsecutiveError {
			return Decision{Pause, fmt.Sprintf("analysis: %s could not be measured %s in a row (consecutive error limit %d): %s; fix the cause, then `sluice resume` (or `sluice abort`)",
				t.Name, times(t.ConsecutiveErrors), t.Limits.ConsecutiveError, lastMessage(t))}
		}
		if t.Kind != KindCompare && t.Kind != KindScore && t.ConsecutiveInconclusives > t.Limits.Inconclusive {
			return Decision{Pause, fmt.Sprintf("analysis: %s had no data%s (inconclusive limit %d): %s; make sure the candidate receives traffic and the query matches its series, then `sluice resume` (or `sluice abort`)",
				t.Name, inARow(t.ConsecutiveInconclusives), t.Limits.Inconclusive, lastMessage(t))}
		}
		if t.Kind != KindScore || t.Last == nil {
			continue
		}
		switch {
		case t.Last.Result == Marginal:
			return Decision{Pause, "analysis: the comparison score is marginal: " + lastSummary(t) + ": " + t.Last.Message +
				"; look at the comparisons (`sluice status`), then `sluice resume` to go on or `sluice abort` to go back to the stable"}
		case t.Last.Result == Inconclusive && final:
			return Decision{Pause, "analysis: the comparisons could not judge the candidate by the end of the step: " + t.Last.Message +
				"; give the candidate more traffic or a longer hold, or lower minSamples, then `sluice resume` (or `sluice abort`)"}
		}
	}
	return Decision{Action: Continue}
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

func inARow(n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" %d times in a row", n)
}

func lastSummary(t Tally) string {
	if t.Last == nil {
		return "no measurement"
	}
	return t.Last.Summary()
}

func lastMessage(t Tally) string {
	if t.Last == nil || t.Last.Message == "" {
		return lastSummary(t)
	}
	return t.Last.Message
}
