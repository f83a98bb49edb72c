package workflows

import (
	"cmp"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"

	"go.temporal.io/sdk/workflow"
)

// setup registers the status query, the command updates (with validators)
// and the goroutine that applies signals.
func (r *rollout) setup(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, func() (api.Status, error) { return r.status(ctx), nil }); err != nil {
		return fmt.Errorf("register status query: %w", err)
	}
	for _, name := range api.Commands() {
		err := workflow.SetUpdateHandlerWithOptions(ctx, name,
			func(ctx workflow.Context, cmd api.Command) (string, error) {
				return r.apply(ctx, name, cmd, "update"), nil
			},
			workflow.UpdateHandlerOptions{
				Validator:   func(ctx workflow.Context, cmd api.Command) error { return r.validate(name, cmd) },
				Description: commandDescriptions[name],
			})
		if err != nil {
			return fmt.Errorf("register %s update: %w", name, err)
		}
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			r.signals(ctx).Select(ctx)
		}
	})
	return nil
}

var commandDescriptions = map[string]string{
	api.CommandPromote:        "End the current hold, or pass the current gate.",
	api.CommandPromoteFull:    "Skip the remaining steps and send the candidate 100% now.",
	api.CommandPause:          "Stop before the next step; the hold's remaining time is kept.",
	api.CommandResume:         "Continue a paused rollout (after drift: take the live traffic as the new starting point).",
	api.CommandAbort:          "Roll back to the traffic from before the rollout. A reason is required.",
	api.CommandReloadAnalysis: "Read the rollout's analysis template again: its judgement follows the template as it is now.",
}

// signals builds a selector over every signal channel, so each signal is
// applied where it arrives and in the order Temporal recorded it.
func (r *rollout) signals(ctx workflow.Context) workflow.Selector {
	sel := workflow.NewSelector(ctx)
	for _, name := range api.Commands() {
		sel.AddReceive(workflow.GetSignalChannel(ctx, name), func(c workflow.ReceiveChannel, _ bool) {
			var cmd api.Command
			c.Receive(ctx, &cmd)
			r.applySignal(ctx, name, cmd)
		})
	}
	sel.AddReceive(workflow.GetSignalChannel(ctx, api.SignalCandidate), func(c workflow.ReceiveChannel, _ bool) {
		var s api.CandidateSignal
		c.Receive(ctx, &s)
		r.noteCandidate(ctx, s)
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, api.SignalTargetDeleted), func(c workflow.ReceiveChannel, _ bool) {
		var h api.ObjectHint
		c.Receive(ctx, &h)
		r.st.DeleteHints++
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, api.SignalWaveVerdict), func(c workflow.ReceiveChannel, _ bool) {
		var v api.WaveVerdict
		c.Receive(ctx, &v)
		r.st.Wave.note(v)
	})
	return sel
}

// drainSignals applies every signal that has arrived but not been read, so
// none is lost when the run ends or continues as new. It returns the pending
// candidate, if any.
func (r *rollout) drainSignals(ctx workflow.Context) string {
	for {
		progressed := false
		for _, name := range api.Commands() {
			var cmd api.Command
			for workflow.GetSignalChannel(ctx, name).ReceiveAsync(&cmd) {
				r.applySignal(ctx, name, cmd)
				progressed = true
			}
		}
		var s api.CandidateSignal
		for workflow.GetSignalChannel(ctx, api.SignalCandidate).ReceiveAsync(&s) {
			r.noteCandidate(ctx, s)
			progressed = true
		}
		var o api.ObjectHint
		for workflow.GetSignalChannel(ctx, api.SignalTargetDeleted).ReceiveAsync(&o) {
			r.st.DeleteHints++
			progressed = true
		}
		var v api.WaveVerdict
		for workflow.GetSignalChannel(ctx, api.SignalWaveVerdict).ReceiveAsync(&v) {
			r.st.Wave.note(v)
			progressed = true
		}
		if !progressed {
			return r.st.PendingCandidate
		}
	}
}

// noteCandidate decides what an offered Revision is to this rollout. Its own
// candidate's state is kept, once per state: only the wait for readiness
// acts on it, later traffic writes check the Revisions themselves. A Revision
// of an older template — a late or re-sent event — is ignored; one of a newer
// template, or of a generation the sender did not know, waits to supersede
// the candidate, which reads it before acting.
func (r *rollout) noteCandidate(ctx workflow.Context, s api.CandidateSignal) {
	switch {
	case s.Revision == "":
	case s.Revision == r.st.Candidate:
		if r.st.Told != nil && r.st.Told.State == s.State {
			return
		}
		switch s.State {
		case knative.RevisionReady, knative.RevisionFailed, knative.RevisionDeleted:
			r.st.Told = &s
		}
	case s.State == knative.RevisionDeleted:
	case s.Generation > 0 && r.st.CandidateGeneration > 0 && s.Generation <= r.st.CandidateGeneration:
		workflow.GetLogger(ctx).Info("ignoring an offered Revision that is not newer",
			"revision", s.Revision, "generation", s.Generation, "candidate", r.st.Candidate, "candidateGeneration", r.st.CandidateGeneration)
	default:
		r.st.PendingCandidate = s.Revision
	}
}

func (r *rollout) applySignal(ctx workflow.Context, name string, cmd api.Command) {
	if err := r.validate(name, cmd); err != nil {
		r.st.Commands = append(r.st.Commands, api.CommandRecord{Name: name, By: cmd.By, Reason: cmd.Reason,
			At: workflow.Now(ctx), Via: "signal", Rejected: err.Error()})
		return
	}
	r.apply(ctx, name, cmd, "signal")
}

// validate says whether a command makes sense now. Its message is shown to
// the caller as is, so it says what the rollout is doing and what would work.
func (r *rollout) validate(name string, cmd api.Command) error {
	st := &r.st
	if cmd.By == "" {
		return fmt.Errorf("%s: say who is sending it (by)", name)
	}
	if st.Phase.Done() {
		return fmt.Errorf("%s rejected: the rollout of %s has finished (%s: %s)", name, st.Candidate, st.Outcome, st.Reason)
	}
	if st.Phase == api.PhaseRollingBack && !(name == api.CommandResume && st.paused()) {
		if st.paused() {
			return fmt.Errorf("%s rejected: the rollback is paused (%s); resume it once that is fixed", name, st.Pause.Reason)
		}
		return fmt.Errorf("%s rejected: the rollout is rolling back (%s)", name, st.Reason)
	}
	switch name {
	case api.CommandPromote:
		switch {
		case st.paused():
			return fmt.Errorf("promote rejected: the rollout is paused (%s); resume it first", st.Pause.Reason)
		case st.Phase == api.PhaseResolving || st.Phase == api.PhaseWaitingReady:
			return fmt.Errorf("promote rejected: candidate %s is not Ready yet; promote --full to go to 100%% once it is, or abort", st.Candidate)
		case st.PromoteRequested:
			return fmt.Errorf("promote rejected: a promote is already pending")
		case st.PromoteFull:
			return fmt.Errorf("promote rejected: already promoting to 100%%")
		}
	case api.CommandPromoteFull:
		if st.PromoteFull {
			return fmt.Errorf("promote-full rejected: already promoting to 100%%")
		}
	case api.CommandPause:
		if st.paused() {
			return fmt.Errorf("pause rejected: already paused (%s)", st.Pause.Reason)
		}
	case api.CommandResume:
		if !st.paused() {
			return fmt.Errorf("resume rejected: the rollout is not paused (phase %s)", st.Phase)
		}
	case api.CommandAbort:
		if cmd.Reason == "" {
			return fmt.Errorf("abort rejected: give a reason; it is kept in the rollout's history")
		}
	case api.CommandReloadAnalysis:
		switch {
		case st.Policy.AnalysisTemplate == nil:
			return fmt.Errorf("reload-analysis rejected: the rollout of %s names no analysis template (%s)", st.Candidate, config.AnnotationAnalysisTemplate)
		case st.Policy.Analysis == nil:
			return fmt.Errorf("reload-analysis rejected: the rollout of %s runs no analysis (%s)", st.Candidate, cmp.Or(st.Shortcut, "it has not read its policy yet"))
		case st.ReloadAnalysis:
			return fmt.Errorf("reload-analysis rejected: a reload is already pending")
		}
	default:
		return fmt.Errorf("unknown command %q", name)
	}
	return nil
}

// apply changes the state for an accepted command and records it.
func (r *rollout) apply(ctx workflow.Context, name string, cmd api.Command, via string) string {
	st := &r.st
	now := workflow.Now(ctx)
	st.Commands = append(st.Commands, api.CommandRecord{Name: name, By: cmd.By, Reason: cmd.Reason, At: now, Via: via})
	switch name {
	case api.CommandPromote:
		st.PromoteRequested = true
		r.emit(ctx, events.ProgressPromoted, cmd.Reason, cmd.By)
		if st.Phase == api.PhaseGate {
			return fmt.Sprintf("promoted %s: passed the gate before step %d of %d (%d%%)", st.Candidate, st.Step+1, len(st.Policy.Steps), st.Policy.Steps[st.Step].Weight)
		}
		return fmt.Sprintf("promoted %s: ended the hold of step %d of %d (%d%%)", st.Candidate, st.Step+1, len(st.Policy.Steps), st.Weight)
	case api.CommandPromoteFull:
		st.PromoteFull = true
		if st.paused() {
			r.resume(now)
		}
		r.emit(ctx, events.ProgressPromoted, "to 100%: "+cmd.Reason, cmd.By)
		return fmt.Sprintf("promoting %s to 100%%", st.Candidate)
	case api.CommandPause:
		reason := "paused by " + cmd.By
		if cmd.Reason != "" {
			reason += ": " + cmd.Reason
		}
		st.pauseFor(pausedByCommand, reason, now)
		r.emit(ctx, events.ProgressPaused, cmd.Reason, cmd.By)
		return fmt.Sprintf("paused the rollout of %s at %d%%", st.Candidate, st.Weight)
	case api.CommandResume:
		r.resume(now)
		r.emit(ctx, events.ProgressResumed, cmd.Reason, cmd.By)
		return fmt.Sprintf("resumed the rollout of %s at %d%%", st.Candidate, st.Weight)
	case api.CommandAbort:
		st.Abort = &cmd
		return fmt.Sprintf("aborting the rollout of %s: rolling back to %s", st.Candidate, st.Stable)
	case api.CommandReloadAnalysis:
		st.ReloadAnalysis = true
		return fmt.Sprintf("reading %s %s again for the rollout of %s: its next round follows it (sluice status shows the version)",
			st.Policy.AnalysisTemplate.Kind(), st.Policy.AnalysisTemplate.Name, st.Candidate)
	}
	return ""
}

// resume lifts a pause. The hold continues with the time it had left; after
// drift, the next write may replace the traffic someone else set, since an
// operator has looked at it and chosen to go on.
func (r *rollout) resume(now time.Time) {
	st := &r.st
	p := st.Pause
	if p == nil {
		return
	}
	if st.Phase == api.PhaseHolding {
		st.HoldUntil = now.Add(p.HoldLeft)
	}
	analysed := p.Cause == pausedByAnalysis || p.Cause == pausedByFinalRound
	if analysed && st.Analysis != nil && st.Policy.Analysis != nil {
		st.Analysis.forgive(now, st.Policy.Analysis.Interval, st.Step+1, p.Cause == pausedByFinalRound)
	}
	st.Rebase = st.Rebase || p.Cause == pausedByDrift
	st.Pause = nil
}
