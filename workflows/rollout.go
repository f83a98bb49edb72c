package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
)

// ReadinessPoll is how long the workflow waits before it watches the
// candidate again when a watch ended early (it could not watch). The
// candidate's event wakes it sooner.
const ReadinessPoll = 10 * time.Second

// a is the nil receiver the workflow names activities by.
var a *activities.Activities

// Rollout is the workflow: resolve the target, wait for the candidate to be
// Ready, then for each step set traffic, verify it, and hold or wait at a
// gate, until the candidate has 100% — or roll back.
func Rollout(ctx workflow.Context, in Input) (Result, error) {
	if in.Target.Namespace == "" || in.Target.Name == "" || in.Candidate == "" {
		return Result{}, temporal.NewNonRetryableApplicationError(
			"rollout input needs target namespace, name and a candidate Revision", "InvalidInput", nil)
	}
	r := &rollout{}
	if in.Carry != nil {
		r.st = *in.Carry
		r.st.Runs++
	} else {
		r.st = State{Target: in.Target, Candidate: in.Candidate, Phase: PhaseResolving, StartedAt: workflow.Now(ctx), Runs: 1}
		if in.RequestedBy != "" {
			r.st.Commands = append(r.st.Commands, CommandRecord{Name: "start", By: in.RequestedBy, At: workflow.Now(ctx), Via: "start"})
		}
	}
	if r.st.RolloutID == "" {
		r.st.RolloutID = workflow.GetInfo(ctx).WorkflowExecution.RunID
	}
	if err := r.setup(ctx); err != nil {
		return Result{}, err
	}
	return r.run(ctx)
}

type rollout struct {
	st State
	// outbox holds progress events not yet sent; the first is being sent.
	outbox        []events.Progress
	senderStarted bool
	// watch is the drift watch of the current hold, if one runs; a new one
	// may start from watchAfter on.
	watch      *trafficWatch
	watchAfter time.Time
}

func (r *rollout) run(ctx workflow.Context) (Result, error) {
	for !r.st.Phase.Done() {
		// Stepping passes in one activity, and a hold publishes when it
		// starts to wait (the last step's never does: it ends the rollout).
		if r.st.Phase != PhaseStepping && r.st.Phase != PhaseHolding {
			r.publish(ctx)
		}
		if err := r.continueAsNewIfSuggested(ctx); err != nil {
			return Result{}, err
		}
		r.settleWatch(ctx)
		now := workflow.Now(ctx)
		switch {
		case r.st.Phase == PhaseRollingBack && r.st.Paused:
			// A rollback write refused for a reason outside the traffic
			// list: the operator fixes the object and resumes.
			paused := true
			_ = workflow.Await(ctx, func() bool { return r.st.Paused != paused })
		case r.st.Phase == PhaseRollingBack:
			r.rollback(ctx)
		case r.st.Abort != nil:
			r.startRollback(OutcomeAborted, fmt.Sprintf("aborted by %s: %s", r.st.Abort.By, r.st.Abort.Reason))
		case r.st.DeleteHints != r.st.DeleteChecked:
			r.checkTarget(ctx)
		case r.st.PendingCandidate != "":
			if err := r.supersede(ctx); err != nil {
				return Result{}, err
			}
		case r.st.Phase != PhaseResolving && r.st.Deadline.Sub(now) < minTimeout:
			r.startRollback(OutcomeRolledBack, fmt.Sprintf("rollout deadline of %s passed before the candidate reached 100%%", r.st.Policy.Deadline))
		case r.st.Paused:
			r.awaitInterrupt(ctx, func() bool { return !r.st.Paused }, "paused")
		case r.st.Rebase:
			r.rebase(ctx)
		default:
			switch r.st.Phase {
			case PhaseResolving:
				r.resolve(ctx)
			case PhaseWaitingReady:
				r.waitReady(ctx)
			case PhaseStepping, PhaseGate:
				r.applyStep(ctx)
			case PhaseHolding:
				r.hold(ctx)
			}
		}
	}
	if r.analysing() && !r.st.Analysis.Ended {
		r.endHooks(ctx)
	}
	r.publish(ctx)
	r.flushEvents(ctx)
	// Let running update handlers answer before the workflow closes.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return Result{}, err
	}
	if next := r.drainSignals(ctx); next != "" && r.st.Phase != PhaseSuperseded && r.newer(ctx, next) {
		// A newer Revision arrived as this rollout ended: roll it out next
		// rather than lose it.
		return Result{}, workflow.NewContinueAsNewError(ctx, WorkflowName, Input{Target: r.st.Target, Candidate: next, RequestedBy: "sluice (arrived while finishing)"})
	}
	return Result{Outcome: r.st.Outcome, Reason: r.st.Reason, Candidate: r.st.Candidate, Stable: r.st.Stable, EndedAt: r.st.EndedAt}, nil
}

func (r *rollout) resolve(ctx workflow.Context) {
	var res activities.Resolved
	err := workflow.ExecuteActivity(readOptions(ctx, "resolve target and policy"), a.ResolveTarget,
		activities.ResolveInput{Target: r.st.Target, Candidate: r.st.Candidate}).Get(ctx, &res)
	if err != nil {
		r.finish(ctx, OutcomeFailed, "cannot resolve the rollout target: "+errorMessage(err))
		return
	}
	now := workflow.Now(ctx)
	r.st.Object, r.st.Configuration, r.st.Policy = res.Object, res.Configuration, res.Policy
	r.st.CandidateGeneration = res.CandidateGeneration
	if r.st.Original == nil {
		// The first candidate of this rollout: what is live now is the
		// pre-rollout traffic. A superseding candidate keeps the first one's.
		r.st.Original = cloneTraffic(res.Traffic)
		r.st.Stable = res.Stable
		// Pinned to what each target routes to now: if Knative has already
		// sent a latestRevision share to the candidate, it keeps it.
		r.st.Baseline = pinLatest(res.Traffic, res.Routed, res.Stable)
		r.st.Live = cloneTraffic(res.Traffic)
	}
	if r.st.Stable == "" {
		// The target's first Revision: there is no traffic to shift from.
		r.st.Policy.Steps = []config.Step{{Weight: 100}}
	}
	r.st.Steps = make([]StepStatus, len(r.st.Policy.Steps))
	for i, s := range r.st.Policy.Steps {
		r.st.Steps[i] = StepStatus{Weight: s.Weight, Hold: s.Hold, Gate: s.Gate}
	}
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
	r.st.Phase = PhaseWaitingReady
	r.emit(ctx, events.ProgressStarted, "", "")
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
	next := len(r.st.Steps)
	for i := range r.st.Steps {
		if r.st.Steps[i].Weight > w {
			next = i
			break
		}
		r.st.Steps[i].Skipped = true
	}
	if next == len(r.st.Steps) {
		r.finish(ctx, OutcomeSucceeded, why+": it has 100% of "+r.st.Stable+"'s traffic; nothing was left to roll out")
		return
	}
	r.st.Step = next
}

func (r *rollout) waitReady(ctx workflow.Context) {
	var (
		rev activities.RevisionState
		err error
	)
	ref := activities.RevisionRef{Namespace: r.st.Target.Namespace, Name: r.st.Candidate}
	asked := workflow.Now(ctx)
	from := ReadinessFromEvent
	if told := r.st.Told; told != nil {
		rev = told.revisionState()
	} else {
		var ok bool
		if rev, err, ok = r.awaitRevision(ctx, ref); !ok {
			return // interrupted, or told by an event: the main loop decides what next
		}
		from = ReadinessFromWatch
	}
	switch {
	case err != nil:
		r.startRollback(OutcomeFailed, "cannot read the candidate Revision: "+errorMessage(err))
		return
	case !rev.Found:
		r.st.ReadinessFrom = from
		r.startRollback(OutcomeFailed, "candidate Revision "+r.st.Candidate+" was deleted")
		return
	case rev.Ready:
		r.st.CandidateReady, r.st.ReadinessFrom = true, from
		if r.analysing() && !r.st.Analysis.Started && !r.beforeStart(ctx) {
			return
		}
		r.st.Phase = PhaseStepping
		return
	case rev.Failed:
		r.st.ReadinessFrom = from
		r.startRollback(OutcomeRolledBack, fmt.Sprintf("candidate Revision %s failed: %s: %s", r.st.Candidate, rev.Reason, rev.Message))
		return
	}
	left := r.st.ReadyDeadline.Sub(workflow.Now(ctx))
	if left <= 0 {
		r.startRollback(OutcomeRolledBack, fmt.Sprintf("candidate Revision %s was not Ready within the progress deadline of %s", r.st.Candidate, r.st.Policy.ProgressDeadline))
		return
	}
	if workflow.Now(ctx).Sub(asked) >= min(left, readinessSpan)-time.Second {
		return // AwaitRevision waited its span already; ask again
	}
	// It answered early (its watch broke): do not ask again at once.
	r.awaitFor(ctx, min(left, ReadinessPoll), "re-read "+r.st.Candidate, func() bool { return r.st.Told != nil })
}

// awaitRevision runs AwaitRevision, which watches the candidate until it is
// Ready, failed or gone, for at most readinessSpan (and the progress
// deadline). The rollout stays responsive meanwhile: the candidate's own
// event, an abort, a pause, a newer candidate or a deleted target cancels
// the wait (ok is false). The watch is the net for events that are lost.
func (r *rollout) awaitRevision(ctx workflow.Context, ref activities.RevisionRef) (rev activities.RevisionState, err error, ok bool) {
	wait := min(max(r.st.ReadyDeadline.Sub(workflow.Now(ctx)), time.Second), readinessSpan)
	r.publish(ctx)
	actx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	fut := workflow.ExecuteActivity(awaitOptions(actx, wait, "wait for "+ref.Name+" to be Ready"), a.AwaitRevision,
		activities.AwaitRevisionInput{RevisionRef: ref, For: wait, Grace: eventGrace})
	paused := r.st.Paused
	_ = workflow.Await(ctx, func() bool {
		return fut.IsReady() || r.st.Told != nil || r.interrupted() || r.st.Paused != paused || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	})
	if !fut.IsReady() {
		return rev, nil, false
	}
	err = fut.Get(ctx, &rev)
	return rev, err, true
}

// eventGrace is how long AwaitRevision holds back what its watch saw, so
// that the candidate's own CloudEvent tells the rollout: the watch is the net
// for a lost event, and costs this much latency only then.
const eventGrace = 5 * time.Second

// readinessSpan bounds one AwaitRevision: a Revision that takes longer
// costs one more activity per span, not one per poll.
const readinessSpan = 2 * time.Minute

func (r *rollout) applyStep(ctx workflow.Context) {
	if r.st.PromoteFull {
		r.st.Step = len(r.st.Steps) - 1
	}
	i := r.st.Step
	step := &r.st.Steps[i]
	if r.analysing() && i == len(r.st.Steps)-1 && i > 0 && !r.st.Analysis.GatePassed && !r.st.PromoteFull &&
		len(r.st.Policy.Analysis.Hooks(config.MomentGate)) > 0 {
		// A person's promote confirms as well as the gate hooks do.
		if !r.st.PromoteRequested && !r.gateHooks(ctx) {
			r.st.Phase = PhaseGate
			r.awaitFor(ctx, r.st.Policy.Analysis.Interval, fmt.Sprintf("gate webhooks before %d%%", step.Weight),
				func() bool { return r.st.PromoteRequested || r.st.PromoteFull })
			return
		}
		r.st.Analysis.GatePassed = true
	}
	if step.Gate && !step.GatePassed && !r.st.PromoteFull {
		r.st.Phase = PhaseGate
		if !r.st.PromoteRequested {
			r.awaitInterrupt(ctx, func() bool { return r.st.PromoteRequested || r.st.PromoteFull }, fmt.Sprintf("gate before %d%%", step.Weight))
			return
		}
		r.st.PromoteRequested = false
		step.GatePassed = true
	}
	r.st.Phase = PhaseStepping
	desired := trafficAt(r.st.Baseline, r.st.Stable, r.st.Candidate, step.Weight)
	step.StartedAt = workflow.Now(ctx)
	if !r.writeTraffic(ctx, desired, fmt.Sprintf("set traffic %d%%", step.Weight)) {
		return
	}
	r.st.Weight = step.Weight
	r.st.Phase = PhaseHolding
	r.st.HoldUntil = workflow.Now(ctx).Add(step.Hold)
	r.st.HoldLeft = 0
	if r.analysing() {
		r.st.Analysis.NextAt = workflow.Now(ctx).Add(r.st.Policy.Analysis.Interval)
	}
	r.emit(ctx, events.ProgressStep, "", "")
}

func (r *rollout) hold(ctx workflow.Context) {
	i := r.st.Step
	step := &r.st.Steps[i]
	last := i == len(r.st.Steps)-1
	if !last && !r.st.PromoteFull {
		left := r.st.HoldUntil.Sub(workflow.Now(ctx))
		summary := fmt.Sprintf("hold %s at %d%%", step.Hold, step.Weight)
		if r.analysing() && r.st.Policy.Analysis.Analyses() {
			if !r.holdAnalysis(ctx, left, summary) {
				return
			}
			left = 0
		}
		if r.st.PromoteRequested {
			r.st.PromoteRequested = false
			left = 0
		}
		if left > 0 {
			if due := r.startWatch(ctx, left); due > 0 {
				left = min(left, due)
			}
			r.awaitFor(ctx, left, summary,
				func() bool { return r.st.PromoteRequested || r.st.PromoteFull })
			return
		}
	}
	step.EndedAt = workflow.Now(ctx)
	if last {
		reason := fmt.Sprintf("%s has 100%% of the traffic that %s had", r.st.Candidate, r.st.Stable)
		if r.st.Stable == "" {
			reason = r.st.Candidate + " has all the traffic: it is the target's first Revision"
		}
		r.finish(ctx, OutcomeSucceeded, reason)
		return
	}
	r.st.Step++
	r.st.Phase = PhaseStepping
}

// writeTraffic sets and verifies a traffic list. It reports whether the list
// is live; if not, it has already decided what happens next (pause on drift,
// roll back or fail otherwise).
func (r *rollout) writeTraffic(ctx workflow.Context, desired []servingTraffic, summary string) bool {
	if activities.SameTraffic(r.st.Live, desired) {
		return true
	}
	set := activities.SetTrafficInput{
		Object: r.st.Object, Expected: r.st.Live, Desired: desired, Force: r.st.Phase == PhaseRollingBack,
	}
	verifyFor := min(r.st.Policy.VerifyTimeout, verifyBurst)
	var applied activities.ApplyTrafficResult
	err := workflow.ExecuteActivity(applyOptions(ctx, verifyFor, summary), a.ApplyTraffic,
		activities.ApplyTrafficInput{SetTrafficInput: set, VerifyFor: verifyFor}).Get(ctx, &applied)
	if err != nil {
		var appErr *temporal.ApplicationError
		errors.As(err, &appErr)
		switch {
		case appErr != nil && appErr.Type() == activities.ErrDrift:
			r.pauseForDrift(ctx, errorMessage(err))
		case appErr != nil && appErr.Type() == activities.ErrTargetNotFound:
			r.finish(ctx, OutcomeFailed, errorMessage(err))
		case appErr != nil && appErr.Type() == activities.ErrWriteRefused:
			// Knative refused the write for something sluice's list did not
			// cause (the object's template, a cluster limit, RBAC): rolling
			// back would be refused too. The operator fixes it and resumes.
			r.st.Paused, r.st.PauseReason = true, errorMessage(err)+"; fix it, then resume to retry this write, or abort to roll back"
			r.emit(ctx, events.ProgressPaused, r.st.PauseReason, "")
		case r.st.Phase == PhaseRollingBack:
			r.finish(ctx, OutcomeFailed, fmt.Sprintf("rollback failed (%s); traffic may be mixed: %s", r.st.Reason, errorMessage(err)))
		default:
			r.startRollback(OutcomeRolledBack, summary+" failed: "+errorMessage(err))
		}
		return false
	}
	r.st.Live = cloneTraffic(desired)
	if applied.Visible {
		return true
	}
	// ApplyTraffic watched for verifyFor already; none left when it had all of it.
	timeout := r.st.Policy.VerifyTimeout - verifyFor
	err = r.verify(ctx, activities.VerifyInput{Object: r.st.Object, Desired: desired, Generation: applied.Generation}, timeout, "verify "+summary)
	if err != nil {
		msg := fmt.Sprintf("%s: traffic did not show in %s status within the verify timeout of %s: %s", summary, r.st.Object, r.st.Policy.VerifyTimeout, errorMessage(err))
		if r.st.Phase == PhaseRollingBack {
			r.finish(ctx, OutcomeFailed, fmt.Sprintf("rollback written but not verified (%s): %s", r.st.Reason, msg))
		} else {
			r.startRollback(OutcomeRolledBack, msg)
		}
		return false
	}
	return true
}

// startRollback records why the rollout ends; the next turn of the loop
// restores the pre-rollout traffic.
func (r *rollout) startRollback(outcome Outcome, reason string) {
	r.st.Ending, r.st.Reason = outcome, reason
	r.st.Phase = PhaseRollingBack
	r.st.Paused, r.st.Drifted, r.st.PauseReason = false, false, ""
}

func (r *rollout) rollback(ctx workflow.Context) {
	restore := rollbackTraffic(&r.st)
	if !r.writeTraffic(ctx, restore, "roll back to "+r.st.Stable) {
		return
	}
	r.st.Weight = 0
	if pinsLatest(r.st.Original, restore) {
		r.st.Reason += "; " + latestPinnedNote(r.st.Target, r.st.Object, r.st.Stable, r.st.Candidate)
	}
	r.st.Outcome = r.st.Ending
	phase := PhaseRolledBack
	switch r.st.Outcome {
	case OutcomeAborted:
		phase = PhaseAborted
	case OutcomeFailed:
		phase = PhaseFailed
	}
	r.end(ctx, phase)
}

// newer reports whether a Revision announced as the rollout ended is newer
// than its candidate: an old Revision's late event must not start a rollout
// backwards.
func (r *rollout) newer(ctx workflow.Context, revision string) bool {
	var rev activities.RevisionState
	err := workflow.ExecuteActivity(readOptions(ctx, "read "+revision), a.ReadRevision,
		activities.RevisionRef{Namespace: r.st.Target.Namespace, Name: revision}).Get(ctx, &rev)
	return err == nil && rev.Found && rev.Generation > r.st.CandidateGeneration
}

// supersede sends the current candidate's traffic back to stable and
// continues as new with the newer candidate. Late events of older Revisions
// are ignored.
func (r *rollout) supersede(ctx workflow.Context) error {
	next := r.st.PendingCandidate
	r.st.PendingCandidate = ""
	var rev activities.RevisionState
	err := workflow.ExecuteActivity(readOptions(ctx, "read "+next), a.ReadRevision,
		activities.RevisionRef{Namespace: r.st.Target.Namespace, Name: next}).Get(ctx, &rev)
	if err != nil || !rev.Found || rev.Generation <= r.st.CandidateGeneration {
		workflow.GetLogger(ctx).Info("ignoring candidate that is not newer", "candidate", next, "current", r.st.Candidate)
		return nil
	}
	if r.st.Phase != PhaseResolving && !r.writeTraffic(ctx, r.st.Baseline, "return "+r.st.Candidate+"'s traffic to "+r.st.Stable) {
		return nil
	}
	r.st.Outcome, r.st.Reason = OutcomeSuperseded, "superseded by "+next
	r.end(ctx, PhaseSuperseded)
	r.publish(ctx)
	r.flushEvents(ctx)
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	r.drainSignals(ctx)
	carry := State{
		Target: r.st.Target, Candidate: next, Phase: PhaseResolving, StartedAt: workflow.Now(ctx),
		Original: r.st.Original, Baseline: r.st.Baseline, Live: r.st.Live, Stable: r.st.Stable,
		Commands: r.st.Commands, Superseded: append(r.st.Superseded, r.st.Candidate), Runs: r.st.Runs,
		EventsEnabled: r.st.EventsEnabled,
	}
	return workflow.NewContinueAsNewError(ctx, WorkflowName, Input{Target: r.st.Target, Candidate: next, Carry: &carry})
}

func (r *rollout) finish(ctx workflow.Context, outcome Outcome, reason string) {
	r.st.Outcome, r.st.Reason = outcome, reason
	phase := PhaseSucceeded
	if outcome == OutcomeFailed {
		phase = PhaseFailed
	}
	r.end(ctx, phase)
}

func (r *rollout) end(ctx workflow.Context, phase Phase) {
	r.st.Phase = phase
	r.st.Paused = false
	r.st.EndedAt = workflow.Now(ctx)
	r.st.HoldUntil = time.Time{}
	by := ""
	if r.st.Abort != nil {
		by = r.st.Abort.By
	}
	r.emit(ctx, endEvent(phase), r.st.Reason, by)
}

// verify waits until the object's status shows the traffic written, for at
// most timeout: one activity, retried quickly (retries cost no history
// events) until its schedule-to-close timeout.
func (r *rollout) verify(ctx workflow.Context, in activities.VerifyInput, timeout time.Duration, summary string) error {
	deadline := workflow.Now(ctx).Add(timeout)
	err := temporal.NewApplicationError(fmt.Sprintf("%s: not verified within %s", in.Object, timeout), activities.ErrNotVisible)
	for {
		// Time left is checked before every activity and timer: a server
		// fires a timeout a little before or after the workflow's own
		// clock reaches it, and a zero or negative timeout fails the
		// workflow task instead of this rollout's step.
		left := deadline.Sub(workflow.Now(ctx))
		if left < minTimeout {
			return err
		}
		// Short rounds of checks with a pause between, rather than one
		// activity for the whole timeout: the workflow looks up between
		// rounds, and a slow status costs a timer, not a stuck worker slot.
		burst := min(left, verifyBurst)
		if err = workflow.ExecuteActivity(verifyOptions(ctx, burst, summary), a.VerifyTraffic, in).Get(ctx, nil); err == nil {
			return nil
		}
		left = deadline.Sub(workflow.Now(ctx))
		if left < minTimeout {
			return err
		}
		_ = workflow.NewTimerWithOptions(ctx, min(left, verifyBurst), workflow.TimerOptions{Summary: "wait for status: " + summary}).Get(ctx, nil)
	}
}

// minTimeout is the shortest timeout or timer the workflow schedules: less
// time than that left counts as none.
const minTimeout = time.Second

// verifyBurst bounds one round of quick status checks.
const verifyBurst = 5 * time.Second

// checkTarget re-reads the traffic object after a delete hint, and ends the
// rollout if it is really gone: nothing is left to roll back.
func (r *rollout) checkTarget(ctx workflow.Context) {
	r.st.DeleteChecked = r.st.DeleteHints
	if r.st.Object.Name == "" {
		return // not resolved yet: resolving will find out
	}
	var exists bool
	if err := workflow.ExecuteActivity(readOptions(ctx, "check "+r.st.Object.String()), a.TargetExists, r.st.Object).Get(ctx, &exists); err != nil || exists {
		return
	}
	r.finish(ctx, OutcomeFailed, r.st.Object.String()+" was deleted during the rollout")
}

// interrupted reports whether something outside the current phase needs the
// main loop's attention.
func (r *rollout) interrupted() bool {
	return r.st.Abort != nil || r.st.PendingCandidate != "" || r.st.Phase == PhaseRollingBack || r.st.DeleteHints != r.st.DeleteChecked
}

// awaitInterrupt waits, bounded by the overall deadline, until cond holds or
// the rollout is interrupted.
func (r *rollout) awaitInterrupt(ctx workflow.Context, cond func() bool, why string) {
	if r.st.Deadline.IsZero() {
		r.awaitFor(ctx, 0, why, cond) // no deadline yet: wait for cond alone
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
	paused := r.st.Paused
	wake := func() bool {
		return cond() || r.interrupted() || r.st.Paused != paused || workflow.GetInfo(ctx).GetContinueAsNewSuggested() ||
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
	return workflow.NewContinueAsNewError(ctx, WorkflowName, Input{Target: r.st.Target, Candidate: r.st.Candidate, Carry: &carry})
}
