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

func (r *rollout) applyStep(ctx workflow.Context) {
	if r.st.PromoteFull {
		r.st.Step = len(r.st.Policy.Steps) - 1
	}
	i := r.st.Step
	step, run := r.st.Policy.Steps[i], &r.st.StepRuns[i]
	if r.analysing() && i == len(r.st.Policy.Steps)-1 && i > 0 && !r.st.Analysis.GatePassed && !r.st.PromoteFull &&
		len(r.st.Policy.Analysis.Hooks(config.MomentGate)) > 0 {
		// A person's promote confirms as well as the gate hooks do.
		if !r.st.PromoteRequested && !r.gateHooks(ctx) {
			r.st.Phase = api.PhaseGate
			r.awaitFor(ctx, r.st.Policy.Analysis.Interval, fmt.Sprintf("gate webhooks before %d%%", step.Weight),
				func() bool { return r.st.PromoteRequested || r.st.PromoteFull })
			return
		}
		r.st.Analysis.GatePassed = true
	}
	if step.Gate && !run.GatePassed && !r.st.PromoteFull {
		r.st.Phase = api.PhaseGate
		if !r.st.PromoteRequested {
			r.awaitInterrupt(ctx, func() bool { return r.st.PromoteRequested || r.st.PromoteFull }, fmt.Sprintf("gate before %d%%", step.Weight))
			return
		}
		r.st.PromoteRequested = false
		run.GatePassed = true
	}
	r.st.Phase = api.PhaseStepping
	desired := r.stepTraffic(step.Weight, i == len(r.st.Policy.Steps)-1)
	run.StartedAt = workflow.Now(ctx)
	if r.st.Capacity.on() && !r.stageUp(ctx, i) {
		return
	}
	if !r.writeTraffic(ctx, desired, fmt.Sprintf("set traffic %d%%", step.Weight)) {
		return
	}
	if r.st.Capacity.on() && !r.stageDown(ctx, i) {
		return
	}
	r.st.Weight = step.Weight
	r.st.Phase = api.PhaseHolding
	r.st.HoldUntil = workflow.Now(ctx).Add(step.Hold)
	if r.analysing() {
		r.st.Analysis.schedule(workflow.Now(ctx), r.st.Policy.Analysis.Interval)
	}
	r.emit(ctx, events.ProgressStep, "", "")
}

func (r *rollout) hold(ctx workflow.Context) {
	i := r.st.Step
	step, run := r.st.Policy.Steps[i], &r.st.StepRuns[i]
	last := i == len(r.st.Policy.Steps)-1
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
	run.EndedAt = workflow.Now(ctx)
	if last {
		if r.st.Capacity.on() {
			r.releaseCandidate(ctx)
		}
		reason := fmt.Sprintf("%s has 100%% of the traffic that %s had", r.st.Candidate, r.st.Stable)
		if r.st.Stable == "" {
			reason = r.st.Candidate + " has all the traffic: it is the target's first Revision"
		}
		if r.st.Shortcut != "" {
			reason += "; " + r.st.Shortcut
		}
		if r.st.Wave.released() {
			r.reachWave(ctx, reason)
			return
		}
		r.finish(ctx, api.OutcomeSucceeded, reason)
		return
	}
	r.st.Step++
	r.st.Phase = api.PhaseStepping
}

// writeTraffic sets and verifies a traffic list. It reports whether the list
// is live; if not, it has already decided what happens next (pause on drift,
// roll back or fail otherwise).
func (r *rollout) writeTraffic(ctx workflow.Context, desired []servingTraffic, summary string) bool {
	if knative.SameTraffic(r.st.Live, desired) {
		return true
	}
	set := activities.SetTrafficInput{
		Object: r.st.Object, Expected: r.st.Live, Desired: desired, Force: r.st.Phase == api.PhaseRollingBack,
	}
	verifyFor := min(r.st.Policy.VerifyTimeout, applyWatch)
	var applied activities.ApplyTrafficResult
	err := workflow.ExecuteActivity(applyOptions(ctx, verifyFor, summary), a.ApplyTraffic,
		activities.ApplyTrafficInput{SetTrafficInput: set, VerifyFor: verifyFor}).Get(ctx, &applied)
	if err != nil {
		var appErr *temporal.ApplicationError
		errors.As(err, &appErr)
		switch {
		case appErr != nil && appErr.Type() == activities.ErrDrift:
			r.pauseForDrift(ctx, errorMessage(err))
		case appErr != nil && appErr.Type() == activities.ErrRevisionNotReady && r.st.Phase != api.PhaseRollingBack && notReady(appErr) == r.st.Candidate:
			// Told Ready (by its event or the watch), the candidate is not
			// Ready when its traffic is written: Knative re-evaluated it.
			// Wait for it again rather than roll back a Revision that may
			// well come back.
			workflow.GetLogger(ctx).Warn("candidate not Ready at the traffic write; waiting for it again", "candidate", r.st.Candidate, "error", err)
			r.st.Told, r.st.CandidateReady, r.st.ReadinessFrom, r.st.Phase = nil, false, "", api.PhaseWaitingReady
		case appErr != nil && appErr.Type() == activities.ErrTargetNotFound:
			r.finish(ctx, api.OutcomeFailed, errorMessage(err))
		case appErr != nil && appErr.Type() == activities.ErrWriteRefused:
			// Knative refused the write for something sluice's list did not
			// cause (the object's template, a cluster limit, RBAC): rolling
			// back would be refused too. The operator fixes it and resumes.
			reason := errorMessage(err) + "; fix it, then resume to retry this write, or abort to roll back"
			r.st.pauseFor(pausedByError, reason, workflow.Now(ctx))
			r.emit(ctx, events.ProgressPaused, reason, "")
		case r.st.Phase == api.PhaseRollingBack:
			r.finish(ctx, api.OutcomeFailed, fmt.Sprintf("rollback failed (%s); traffic may be mixed: %s", r.st.Reason, errorMessage(err)))
		default:
			r.startRollback(api.OutcomeRolledBack, summary+" failed: "+errorMessage(err))
		}
		return false
	}
	r.st.Live = knative.CloneTraffic(desired)
	if applied.Visible {
		return true
	}
	// ApplyTraffic watched for verifyFor already; none left when it had all of it.
	timeout := r.st.Policy.VerifyTimeout - verifyFor
	err = r.verify(ctx, activities.VerifyInput{Object: r.st.Object, Desired: desired, Generation: applied.Generation}, timeout, applied.Lacks, "verify "+summary)
	if err != nil {
		msg := fmt.Sprintf("%s: traffic did not show in %s status within the verify timeout of %s: %s", summary, r.st.Object, r.st.Policy.VerifyTimeout, errorMessage(err))
		if r.st.Phase == api.PhaseRollingBack {
			r.finish(ctx, api.OutcomeFailed, fmt.Sprintf("rollback written but not verified (%s): %s", r.st.Reason, msg))
		} else {
			r.startRollback(api.OutcomeRolledBack, msg)
		}
		return false
	}
	return true
}

// verify waits until the object's status shows the traffic written, for at
// most timeout: one activity, retried quickly (retries cost no history
// events) until its schedule-to-close timeout.
func (r *rollout) verify(ctx workflow.Context, in activities.VerifyInput, timeout time.Duration, lacks, summary string) error {
	deadline := workflow.Now(ctx).Add(timeout)
	// What the write's own watch last saw missing, until a round of checks
	// says better.
	if lacks == "" {
		lacks = fmt.Sprintf("%s: not verified within %s", in.Object, timeout)
	}
	err := temporal.NewApplicationError(lacks, activities.ErrNotVisible)
	for {
		// Time left is checked before every activity and timer: a server
		// fires a timeout a little before or after the workflow's own
		// clock reaches it, and a zero or negative timeout fails the
		// workflow task instead of this rollout's step.
		left := deadline.Sub(workflow.Now(ctx))
		if left < minTimeout {
			return err
		}
		// Rounds of watching, each as long as the write's own watch, rather
		// than one activity for the whole timeout: the workflow looks up
		// between rounds. A round that watched to its end goes straight on
		// to the next (a pause would only hide a status that shows during
		// it); one that failed early (the API server refusing) pauses
		// first.
		burst := min(left, applyWatch)
		began := workflow.Now(ctx)
		if err = workflow.ExecuteActivity(verifyOptions(ctx, burst, summary), a.VerifyTraffic, in).Get(ctx, nil); err == nil {
			return nil
		}
		left = deadline.Sub(workflow.Now(ctx))
		if left < minTimeout {
			return err
		}
		if workflow.Now(ctx).Sub(began) >= burst/2 {
			continue
		}
		_ = workflow.NewTimerWithOptions(ctx, min(left, verifyBurst), workflow.TimerOptions{Summary: "wait for status: " + summary}).Get(ctx, nil)
	}
}

// verifyBurst is the pause after a round of status checks that failed early.
const verifyBurst = 5 * time.Second

// applyWatch bounds how long the write itself, and then each round of
// checks, watches for its traffic in the status. Long enough that a busy
// cluster's status (5 to 10 s when 100 rollouts step at once on two cores)
// shows within it: a write that hands over to a round of VerifyTraffic costs
// two more workflow tasks and an activity, each slowest exactly when the
// cluster is. A command arriving meanwhile acts once the status shows the
// traffic or the verify timeout ends, as it did with shorter rounds.
const applyWatch = 20 * time.Second

// notReady names the Revision a RevisionNotReady error is about.
func notReady(err *temporal.ApplicationError) string {
	var name string
	if err.HasDetails() && err.Details(&name) == nil {
		return name
	}
	return ""
}
