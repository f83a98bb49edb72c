package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// a is the nil receiver the workflow names activities by.
var a *activities.Activities

// Rollout is the workflow: resolve the target, wait for the candidate to be
// Ready, then for each step set traffic, verify it, and hold or wait at a
// gate, until the candidate has 100% — or roll back.
func Rollout(ctx workflow.Context, in RunInput) (api.Result, error) {
	if in.Target.Namespace == "" || in.Target.Name == "" || (in.Candidate == "" && in.Undo == nil) {
		return api.Result{}, temporal.NewNonRetryableApplicationError(
			"rollout input needs target namespace, name and a candidate Revision", "InvalidInput", nil)
	}
	r := &rollout{}
	if in.Carry != nil {
		r.st = *in.Carry
		r.st.Runs++
	} else {
		r.st = state{Target: in.Target, Candidate: in.Candidate, Phase: api.PhaseResolving, StartedAt: workflow.Now(ctx), Runs: 1}
		switch {
		case in.Undo != nil:
			r.st.Undo = &api.Command{By: in.RequestedBy, Reason: in.Undo.Reason}
			r.st.Commands = append(r.st.Commands, api.CommandRecord{Name: api.CommandUndo, By: in.RequestedBy, Reason: in.Undo.Reason, At: workflow.Now(ctx), Via: "start"})
		case in.RequestedBy != "":
			r.st.Commands = append(r.st.Commands, api.CommandRecord{Name: "start", By: in.RequestedBy, At: workflow.Now(ctx), Via: "start"})
		}
	}
	if r.st.RolloutID == "" {
		r.st.RolloutID = workflow.GetInfo(ctx).WorkflowExecution.RunID
	}
	if err := r.setup(ctx); err != nil {
		return api.Result{}, err
	}
	return r.run(ctx)
}

type rollout struct {
	st state
	// outbox holds progress events not yet sent; the first is being sent.
	outbox        []events.Progress
	senderStarted bool
	// sinkSlow: a progress event's quick try failed in this run; the rest
	// go by activity (sendEvent).
	sinkSlow bool
	// watch is the drift watch of the current hold, if one runs; a new one
	// may start from watchAfter on.
	watch      *trafficWatch
	watchAfter time.Time
}

func (r *rollout) run(ctx workflow.Context) (api.Result, error) {
	for !r.st.Phase.Done() {
		// Stepping passes in one activity, and a hold publishes when it
		// starts to wait (the last step's never does: it ends the rollout).
		if r.st.Phase != api.PhaseStepping && r.st.Phase != api.PhaseHolding {
			r.publish(ctx)
		}
		if err := r.continueAsNewIfSuggested(ctx); err != nil {
			return api.Result{}, err
		}
		r.settleWatch(ctx)
		now := workflow.Now(ctx)
		switch {
		case r.st.Phase == api.PhaseRollingBack && r.st.paused():
			// A rollback write refused for a reason outside the traffic
			// list: the operator fixes the object and resumes.
			_ = workflow.Await(ctx, func() bool { return !r.st.paused() })
		case r.st.Phase == api.PhaseRollingBack:
			r.rollback(ctx)
		case r.st.Abort != nil:
			r.startRollback(api.OutcomeAborted, fmt.Sprintf("aborted by %s: %s", r.st.Abort.By, r.st.Abort.Reason))
		case r.waveRollback():
			_, reason := r.st.Wave.take()
			r.startRollback(api.OutcomeRolledBack, "wave plan: "+reason)
		case r.st.DeleteHints != r.st.DeleteChecked:
			r.checkTarget(ctx)
		case r.st.PendingCandidate != "":
			if err := r.supersede(ctx); err != nil {
				return api.Result{}, err
			}
		case r.st.ReloadAnalysis:
			r.reloadAnalysis(ctx)
		case r.st.Phase != api.PhaseResolving && r.st.Phase != api.PhaseWaitingWave && r.st.Phase != api.PhaseWaveHold && r.st.Deadline.Sub(now) < minTimeout:
			r.startRollback(api.OutcomeRolledBack, fmt.Sprintf("rollout deadline of %s passed before the candidate reached 100%%", r.st.Policy.Deadline))
		case r.st.paused():
			r.awaitInterrupt(ctx, func() bool { return !r.st.paused() }, "paused")
		case r.st.Rebase:
			r.rebase(ctx)
		default:
			switch r.st.Phase {
			case api.PhaseResolving:
				r.resolve(ctx)
			case api.PhaseWaitingReady:
				r.waitReady(ctx)
			case api.PhaseStepping, api.PhaseGate:
				if r.st.Wave.holds() {
					r.awaitRelease(ctx)
				} else {
					r.applyStep(ctx)
				}
			case api.PhaseWaitingWave:
				r.awaitRelease(ctx)
			case api.PhaseWaveHold:
				r.awaitWaveEnd(ctx)
			case api.PhaseHolding:
				r.hold(ctx)
			}
		}
	}
	if r.analysing() && !r.st.Analysis.Ended {
		r.endHooks(ctx)
	}
	r.endWave(ctx)
	r.publish(ctx)
	r.flushEvents(ctx)
	// Let running update handlers answer before the workflow closes.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return api.Result{}, err
	}
	if next := r.drainSignals(ctx); next != "" && r.st.Phase != api.PhaseSuperseded && r.newer(ctx, next) {
		// A newer Revision arrived as this rollout ended: roll it out next
		// rather than lose it.
		return api.Result{}, workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, api.Input{Target: r.st.Target, Candidate: next, RequestedBy: "sluice (arrived while finishing)"})
	}
	return api.Result{Outcome: r.st.Outcome, Reason: r.st.Reason, Candidate: r.st.Candidate, Stable: r.st.Stable, EndedAt: r.st.EndedAt}, nil
}

func (r *rollout) resolve(ctx workflow.Context) {
	var res activities.Resolved
	err := workflow.ExecuteActivity(readOptions(ctx, "resolve target and policy"), a.ResolveTarget,
		activities.ResolveInput{Target: r.st.Target, Candidate: r.st.Candidate, Undo: r.st.Undo != nil}).Get(ctx, &res)
	if err != nil {
		// A refused policy is told like any end of a rollout: in its status,
		// the UI and a progress event, where the service owner looks.
		var refused activities.Refusal
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.HasDetails() && appErr.Details(&refused) == nil {
			r.st.EventsEnabled = refused.Events
		}
		r.st.Outcome, r.st.Reason = api.OutcomeFailed, "cannot resolve the rollout target: "+errorMessage(err)
		if refused.Mark.Name != "" {
			r.st.Object = refused.Mark
			r.markCandidate(ctx)
		}
		r.end(ctx, api.PhaseFailed)
		return
	}
	now := workflow.Now(ctx)
	r.st.Object, r.st.Configuration, r.st.Policy = res.Object, res.Configuration, res.Policy
	if res.Candidate != "" {
		r.st.Candidate = res.Candidate // an undo's, from the target's history
	}
	r.st.CandidateGeneration = res.CandidateGeneration
	if r.st.Original == nil {
		// The first candidate of this rollout: what is live now is the
		// pre-rollout traffic. A superseding candidate keeps the first one's.
		r.st.Original = knative.CloneTraffic(res.Traffic)
		r.st.Stable = res.Stable
		// Pinned to what each target routes to now: if Knative has already
		// sent a latestRevision share to the candidate, it keeps it.
		r.st.Baseline = pinLatest(res.Traffic, res.Routed, res.Stable)
		r.st.Live = knative.CloneTraffic(res.Traffic)
	}
	if r.st.Stable == "" {
		// The target's first Revision: there is no traffic to shift from.
		r.st.Policy.Steps = []config.Step{{Weight: 100}}
	}
	r.shortcut(res.Revert)
	r.planPreviewHold()
	if r.st.Policy.Capacity != nil && r.st.Stable != "" && !r.planCapacity(ctx, res) {
		return
	}
	if r.st.Policy.Waves != nil && r.st.Stable != "" && !r.planWave(ctx, res.Release) {
		return
	}
	r.st.StepRuns = make([]stepRun, len(r.st.Policy.Steps))
	r.st.Step, r.st.Weight = 0, 0
	r.st.ReadyDeadline = now.Add(r.st.Policy.ProgressDeadline)
	r.st.Deadline = now.Add(r.st.Policy.Deadline)
	r.st.EventsEnabled = res.Events
	if r.st.Policy.Analysis != nil {
		r.st.Analysis = newAnalysisState(r.st.Policy.Analysis)
	}
	if !r.writeTraffic(ctx, r.st.Baseline, "pin traffic to "+r.st.Stable) {
		return
	}
	r.st.Phase = api.PhaseWaitingReady
	by := ""
	if r.st.Undo != nil {
		by = r.st.Undo.By
	}
	r.emit(ctx, events.ProgressStarted, r.st.Shortcut, by)
	if r.st.Undo != nil && res.CandidateReady {
		// Going back to a Revision that is Ready: no wait, no event to
		// wait for; the one write follows.
		r.st.CandidateReady, r.st.ReadinessFrom = true, api.ReadinessFromWatch
		r.st.Phase = api.PhaseStepping
	}
	if w := candidateShare(r.st.Baseline, r.st.Stable, r.st.Candidate); w > 0 && r.st.Stable != "" {
		// Knative routed a latestRevision share to the candidate before
		// sluice pinned it: go on from there, never take it back in one write.
		r.st.CandidateReady = true
		r.startFrom(ctx, w, fmt.Sprintf("Knative had already sent %s %d%% of the traffic (a latestRevision target followed it before sluice pinned it)", r.st.Candidate, w))
	}
}

// startFrom moves the plan to the first step above weight w, the
// candidate's live share: steps at or below it are skipped. At 100% the
// rollout has nothing left to do and succeeds, saying why.
func (r *rollout) startFrom(ctx workflow.Context, w int64, why string) {
	r.st.Weight = w
	next := len(r.st.Policy.Steps)
	for i, step := range r.st.Policy.Steps {
		if step.Weight > w {
			next = i
			break
		}
		r.st.StepRuns[i].Skipped = true
	}
	if next == len(r.st.Policy.Steps) {
		r.finish(ctx, api.OutcomeSucceeded, why+": it has 100% of "+r.st.Stable+"'s traffic; nothing was left to roll out")
		return
	}
	r.st.Step = next
}

// minTimeout is the shortest timeout or timer the workflow schedules: less
// time than that left counts as none.
const minTimeout = time.Second

// interrupted reports whether something outside the current phase needs the
// main loop's attention.
func (r *rollout) interrupted() bool {
	return r.st.Abort != nil || r.st.PendingCandidate != "" || r.st.Phase == api.PhaseRollingBack || r.st.DeleteHints != r.st.DeleteChecked || r.waveRollback() ||
		r.st.ReloadAnalysis
}

// awaitInterrupt waits, bounded by the overall deadline, until cond holds or
// the rollout is interrupted.
func (r *rollout) awaitInterrupt(ctx workflow.Context, cond func() bool, why string) {
	if r.st.Deadline.IsZero() || r.st.Phase == api.PhaseWaitingWave || r.st.Phase == api.PhaseWaveHold {
		// No deadline yet, or none while the wave plan holds the rollout:
		// wait for cond alone.
		r.awaitFor(ctx, 0, why, cond)
		return
	}
	left := r.st.Deadline.Sub(workflow.Now(ctx))
	if left < minTimeout {
		// Waiting 0 would mean forever: the main loop's deadline check
		// runs next instead.
		return
	}
	r.awaitFor(ctx, left, why+" (deadline)", cond)
}

// awaitFor waits up to d (forever when d is 0) for cond, an interruption,
// a pause or a suggestion to continue as new.
func (r *rollout) awaitFor(ctx workflow.Context, d time.Duration, summary string, cond func() bool) {
	r.publish(ctx)
	paused := r.st.paused()
	wake := func() bool {
		return cond() || r.interrupted() || r.st.paused() != paused || workflow.GetInfo(ctx).GetContinueAsNewSuggested() ||
			(r.watch != nil && r.watch.fut.IsReady())
	}
	if d <= 0 {
		_ = workflow.Await(ctx, wake)
		return
	}
	_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: d, TimerOptions: workflow.TimerOptions{Summary: summary}}, wake)
}

func errorMessage(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		if cause := errors.Unwrap(timeoutErr); cause != nil {
			return "timed out; last error: " + errorMessage(cause)
		}
		return "timed out"
	}
	return err.Error()
}

// continueAsNewIfSuggested starts a fresh run carrying the whole state when
// Temporal says the history is getting long. Signals that arrived are applied
// first and running update handlers finish, so nothing is lost on the way.
func (r *rollout) continueAsNewIfSuggested(ctx workflow.Context) error {
	if !workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
		return nil
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	r.drainSignals(ctx)
	r.flushEvents(ctx)
	carry := r.st
	return workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, RunInput{Input: api.Input{Target: r.st.Target, Candidate: r.st.Candidate}, Carry: &carry})
}
