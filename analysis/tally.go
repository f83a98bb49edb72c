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
	Name              string `json:"name"`
	Kind              string `json:"kind"`
	Limits            Limits `json:"limits"`
	Measured          int    `json:"measured"`
	Passed            int    `json:"passed"`
	Failures          int    `json:"failures"`
	Errors            int    `json:"errors"`
	ConsecutiveErrors int    `json:"consecutiveErrors"`
	Inconclusives     int    `json:"inconclusives"`
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
	case Failed:
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

// Judge decides over the tallies, in their order: a check past its failure
// limit rolls back (before anything else is considered); otherwise one with
// a run of errors or of measurements without data past its limit pauses.
func Judge(tallies []Tally) Decision {
	for _, t := range tallies {
		if t.Failures > t.Limits.Failure {
			return Decision{Rollback, fmt.Sprintf("analysis: %s failed %s (failure limit %d); last: %s",
				t.Name, times(t.Failures), t.Limits.Failure, lastSummary(t))}
		}
	}
	for _, t := range tallies {
		if t.ConsecutiveErrors > t.Limits.ConsecutiveError {
			return Decision{Pause, fmt.Sprintf("analysis: %s could not be measured %s in a row (consecutive error limit %d): %s; fix the cause, then `sluice resume` (or `sluice abort`)",
				t.Name, times(t.ConsecutiveErrors), t.Limits.ConsecutiveError, lastMessage(t))}
		}
		if t.ConsecutiveInconclusives > t.Limits.Inconclusive {
			return Decision{Pause, fmt.Sprintf("analysis: %s had no data%s (inconclusive limit %d): %s; make sure the candidate receives traffic and the query matches its series, then `sluice resume` (or `sluice abort`)",
				t.Name, inARow(t.ConsecutiveInconclusives), t.Limits.Inconclusive, lastMessage(t))}
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
