package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// AnnotationRollbackWindow turns on the rollback window: a candidate
	// whose template equals a Revision's that had 100% of the traffic less
	// than this long ago goes straight to 100% in one write, without steps
	// or analysis (a revert of a change that just shipped), e.g. "24h".
	AnnotationRollbackWindow = Prefix + "rollback-window"
	// AnnotationStableHistory is written by sluice on the traffic object
	// when a Revision stops having 100% of the traffic: the Revisions that
	// had it, newest first, each with when it ended, as
	// "hello-00002@2026-12-06T16:00:00Z,hello-00001@…". `sluice undo` goes
	// back to the first; the rollback window compares candidates with all
	// of them. It is on the object, not in Temporal, so it outlives the
	// namespace's retention of closed rollouts.
	AnnotationStableHistory = Prefix + "stable-history"
)

// StableHistoryLength is how many Revisions AnnotationStableHistory keeps.
const StableHistoryLength = 10

// Stint is a Revision that had 100% of the traffic until Until.
type Stint struct {
	Revision string    `json:"revision"`
	Until    time.Time `json:"until"`
}

// ParseStableHistory reads AnnotationStableHistory's value, newest first
// whatever order a hand edit left. An entry it cannot read is skipped: the
// history is a convenience, and what is left of it still serves.
func ParseStableHistory(value string) []Stint {
	var out []Stint
	for _, part := range SplitList(value) {
		rev, at, ok := strings.Cut(part, "@")
		if !ok || rev == "" {
			continue
		}
		until, err := time.Parse(time.RFC3339, at)
		if err != nil {
			continue
		}
		out = append(out, Stint{Revision: rev, Until: until.UTC()})
	}
	slices.SortStableFunc(out, newestFirst)
	return out
}

func newestFirst(a, b Stint) int { return b.Until.Compare(a.Until) }

// FormatStableHistory writes stints as AnnotationStableHistory's value.
func FormatStableHistory(stints []Stint) string {
	parts := make([]string, len(stints))
	for i, s := range stints {
		parts[i] = s.Revision + "@" + s.Until.UTC().Format(time.RFC3339)
	}
	return strings.Join(parts, ",")
}

// WithStint puts s first in history, drops an earlier entry of the same
// Revision and keeps StableHistoryLength entries. Adding the same stint
// twice gives the same history, so a retried write changes nothing.
func WithStint(history []Stint, s Stint) []Stint {
	s.Until = s.Until.UTC().Truncate(time.Second)
	out := []Stint{s}
	for _, h := range history {
		if h.Revision != s.Revision {
			out = append(out, h)
		}
	}
	slices.SortStableFunc(out, newestFirst)
	if len(out) > StableHistoryLength {
		out = out[:StableHistoryLength]
	}
	return out
}

// parseRollbackWindow reads AnnotationRollbackWindow: a positive duration.
// Days are what people write for it, so "7d" gets the hours it means.
func parseRollbackWindow(annotations map[string]string, fail func(error)) time.Duration {
	raw, ok := annotations[AnnotationRollbackWindow]
	if !ok {
		return 0
	}
	trimmed := strings.TrimSpace(raw)
	if days, found := strings.CutSuffix(trimmed, "d"); found {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			fail(&FieldError{Key: AnnotationRollbackWindow, Value: raw,
				Message: fmt.Sprintf("is not a duration sluice reads; write %dh for %s", n*24, trimmed)})
			return 0
		}
	}
	d, err := parseDuration(AnnotationRollbackWindow, raw, false)
	fail(err)
	return d
}
