package mirror

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// FromProgress is the status a progress event shows. prev is what the
// resource showed before, if it was the same rollout's: what this event
// does not say (the last analysis verdict, the last command, a pause) is
// carried from it.
func FromProgress(p events.Progress, prev Status) Status {
	d := p.Data
	s := Status{
		Phase: d.Phase, Candidate: d.Candidate, Stable: d.Stable, Weight: d.Weight,
		Step: d.Step, StepCount: d.StepCount, Traffic: d.Traffic, WorkflowID: d.WorkflowID,
		RolloutID: rolloutOf(p.ID), Sequence: d.Sequence, ObservedAt: microTime(p.Time),
	}
	if prev.RolloutID == s.RolloutID {
		s.Analysis, s.LastCommand, s.Paused, s.Message = prev.Analysis, prev.LastCommand, prev.Paused, prev.Message
		s.StepStartedAt = prev.StepStartedAt
	}
	if p.Type == events.ProgressStep {
		s.StepStartedAt = &metav1.Time{Time: p.Time}
	}
	if d.HoldUntil != nil {
		s.HoldUntil, s.GateAfterHold = &metav1.Time{Time: *d.HoldUntil}, d.GateAfterHold
	}
	if !bySluice(d.By) {
		s.LastCommand = &Command{Name: strings.TrimPrefix(p.Type, events.ProgressPrefix), By: d.By, Reason: d.Reason, At: metav1.Time{Time: p.Time}}
	}
	switch p.Type {
	case events.ProgressPaused:
		s.Paused, s.Message = true, d.Reason
	case events.ProgressResumed, events.ProgressStep, events.ProgressPromoted, events.ProgressStarted:
		s.Paused, s.Message = false, d.Reason
	case events.ProgressAnalysis:
		s.Analysis = roundOf(d.Measurements, d.Reason)
	}
	if api.Phase(d.Phase).Done() {
		s.Outcome, s.Message, s.Paused = d.Phase, d.Reason, false
	}
	if s.Paused {
		s.Phase = string(api.PhasePaused)
	}
	return s
}

// FromStatus is the status the workflow's own answer shows: what the
// resource is rebuilt from when it was deleted, or refreshed from when the
// rollout changed without a progress event (a hold ending at a gate).
func FromStatus(v api.Status, prev Status) Status {
	s := Status{
		Phase: string(v.Shown), Paused: v.Paused, Candidate: v.Candidate, Stable: v.Stable, Weight: v.Weight,
		Step: v.StepNumber, StepCount: v.StepCount, Traffic: knative.FormatTraffic(v.Live),
		WorkflowID: api.RolloutID(v.Target), ObservedAt: microTime(v.AsOf), Message: v.PauseReason,
	}
	if prev.Candidate == v.Candidate && !prev.ObservedAt.IsZero() && !prev.ObservedAt.Time.Before(v.StartedAt) {
		// The same rollout: its ID and event count carry over, and so does
		// the round the resource already shows, which the events described
		// in full.
		s.RolloutID, s.Sequence, s.Analysis = prev.RolloutID, prev.Sequence, prev.Analysis
	}
	if v.Phase == api.PhaseHolding && !v.HoldUntil.IsZero() && v.StepNumber < v.StepCount {
		s.HoldUntil, s.GateAfterHold = &metav1.Time{Time: v.HoldUntil}, v.GateAfterHold()
	}
	if n := v.StepNumber; n > 0 && n <= len(v.Steps) && !v.Steps[n-1].StartedAt.IsZero() {
		s.StepStartedAt = &metav1.Time{Time: v.Steps[n-1].StartedAt}
	}
	if s.Analysis == nil && v.Analysis != nil {
		s.Analysis = latestRound(v.Analysis.Recent)
	}
	for i := len(v.Commands) - 1; i >= 0; i-- {
		if c := v.Commands[i]; c.Rejected == "" {
			s.LastCommand = &Command{Name: c.Name, By: c.By, Reason: c.Reason, At: metav1.Time{Time: c.At}}
			break
		}
	}
	if v.Phase.Done() {
		s.Outcome, s.Message, s.Paused = string(v.Phase), v.Reason, false
	}
	if s.Message == "" && v.Phase == api.PhaseGate && v.StepNumber > 0 && v.StepNumber <= len(v.Steps) {
		s.Message = fmt.Sprintf("awaiting promotion before step %d/%d (%d%%): `sluice promote %s` goes on",
			v.StepNumber, v.StepCount, v.Steps[v.StepNumber-1].Weight, v.Target.Name)
	}
	return s
}

// Finish fills in what follows from the rest: the progress column, whether
// the rollout ended, and the conditions, as of generation.
func (s *Status) Finish(generation int64) {
	s.ObservedGeneration = generation
	s.Ended = s.Outcome != ""
	s.Progress = ""
	if s.StepCount > 0 {
		s.Progress = fmt.Sprintf("%d/%d", s.Step, s.StepCount)
	}
	at := metav1.Now()
	if s.ObservedAt != nil {
		at = metav1.Time{Time: s.ObservedAt.Time}
	}
	set := func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg,
			ObservedGeneration: generation, LastTransitionTime: at})
	}
	reason := s.Phase
	if reason == "" {
		reason = "Unknown"
	}
	msg := s.Message
	switch s.Outcome {
	case "":
		if msg == "" {
			msg = fmt.Sprintf("%s at %d%% (step %s)", s.Candidate, s.Weight, s.Progress)
			if s.HoldUntil != nil {
				msg += ", holding until " + s.HoldUntil.UTC().Format(time.TimeOnly) + " UTC"
			}
			s.Message = msg
		}
		set(ConditionReady, false, reason, msg)
		set(ConditionReconciling, true, reason, msg)
		set(ConditionStalled, false, reason, "")
	case string(api.PhaseSucceeded):
		set(ConditionReady, true, reason, msg)
		set(ConditionReconciling, false, reason, "")
		set(ConditionStalled, false, reason, "")
	case string(api.PhaseSuperseded):
		// A newer candidate's rollout takes over the target.
		set(ConditionReady, false, reason, msg)
		set(ConditionReconciling, true, reason, msg)
		set(ConditionStalled, false, reason, "")
	default:
		set(ConditionReady, false, reason, msg)
		set(ConditionReconciling, false, reason, "")
		set(ConditionStalled, true, reason, msg)
	}
}

// newer reports whether s describes a later state of the target's
// rollouts than old: a later time, or at the same time a later event of
// the same rollout.
func (s Status) newer(old Status) bool {
	switch {
	case old.ObservedAt == nil:
		return true
	case s.ObservedAt == nil:
		return false
	case !s.ObservedAt.Time.Equal(old.ObservedAt.Time):
		return s.ObservedAt.After(old.ObservedAt.Time)
	}
	return s.RolloutID != old.RolloutID || s.Sequence >= old.Sequence
}

// rolloutOf is the rollout part of a progress event's ID ("<rollout>-<n>").
func rolloutOf(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	return &metav1.MicroTime{Time: t}
}

// severity orders measurement results from best to worst.
var severity = map[analysis.Result]int{
	analysis.Passed: 0, analysis.Marginal: 1, analysis.Inconclusive: 2, analysis.Error: 3, analysis.Failed: 4,
}

// roundOf is a round's verdict: the worst result among the measurements
// that count (dry runs are shown, never acted on).
func roundOf(ms []analysis.Measurement, msg string) *Analysis {
	var worst analysis.Result
	for _, m := range ms {
		if m.DryRun {
			continue
		}
		if worst == "" || severity[m.Result] > severity[worst] {
			worst = m.Result
		}
	}
	if worst == "" {
		return nil
	}
	return &Analysis{Verdict: string(worst), Message: msg}
}

// latestRound is the verdict of the newest measurement of each check.
func latestRound(recent []analysis.Measurement) *Analysis {
	seen := map[string]bool{}
	var round []analysis.Measurement
	var parts []string
	for i := len(recent) - 1; i >= 0; i-- {
		m := recent[i]
		if seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		round = append(round, m)
		parts = append(parts, m.Name+" "+string(m.Result))
	}
	return roundOf(round, strings.Join(parts, "; "))
}
