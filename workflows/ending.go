package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// markCandidate records the rollout's outcome on the traffic object, so a
// later event of the candidate does not start it again. A mark that cannot
// be written is named in the reason: the rollout has ended all the same.
func (r *rollout) markCandidate(ctx workflow.Context) {
	r.markEnded(ctx, r.st.Candidate, string(r.st.Outcome))
}

// markEnded annotates the traffic object: revision's rollout ended so.
func (r *rollout) markEnded(ctx workflow.Context, revision, outcome string) {
	in := activities.MarkInput{Object: r.st.Object, Revision: revision, Outcome: outcome}
	value := config.Ended(revision, outcome)
	if err := workflow.ExecuteActivity(readOptions(ctx, "mark "+r.st.Object.String()+" "+value), a.MarkEnded, in).Get(ctx, nil); err != nil {
		r.st.Reason += fmt.Sprintf("; %s could not be annotated %s=%s (%s), so a later event of %s may start its rollout again",
			r.st.Object, config.AnnotationEnded, value, errorMessage(err), revision)
	}
}

// startRollback records why the rollout ends; the next turn of the loop
// restores the pre-rollout traffic.
func (r *rollout) startRollback(outcome api.Outcome, reason string) {
	r.st.Ending, r.st.Reason = outcome, reason
	r.st.Phase = api.PhaseRollingBack
	r.st.Pause = nil
}

func (r *rollout) rollback(ctx workflow.Context) {
	restore := rollbackTraffic(&r.st)
	if r.st.Capacity.on() {
		r.capacityBack(ctx)
		if r.st.paused() {
			return
		}
	}
	if !r.writeTraffic(ctx, restore, "roll back to "+r.st.Stable) {
		return
	}
	if r.st.Capacity.on() {
		r.releaseCandidate(ctx)
	}
	r.st.Weight = 0
	if pinsLatest(r.st.Original, restore) {
		r.st.Reason += "; " + latestPinnedNote(r.st.Target, r.st.Object, r.st.Stable, r.st.Candidate)
	}
	r.st.Outcome = r.st.Ending
	r.markCandidate(ctx)
	phase := api.PhaseRolledBack
	switch r.st.Outcome {
	case api.OutcomeAborted:
		phase = api.PhaseAborted
	case api.OutcomeFailed:
		phase = api.PhaseFailed
	}
	r.end(ctx, phase)
}

// newer reports whether a Revision announced as the rollout ended is newer
// than its candidate: an old Revision's late event must not start a rollout
// backwards.
func (r *rollout) newer(ctx workflow.Context, revision string) bool {
	var rev knative.RevisionState
	err := workflow.ExecuteActivity(readOptions(ctx, "read "+revision), a.ReadRevision,
		knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: revision}).Get(ctx, &rev)
	return err == nil && rev.Found && rev.Generation > r.st.CandidateGeneration
}

// supersede sends the current candidate's traffic back to stable and
// continues as new with the newer candidate. Late events of older Revisions
// are ignored.
func (r *rollout) supersede(ctx workflow.Context) error {
	next := r.st.PendingCandidate
	r.st.PendingCandidate = ""
	var rev knative.RevisionState
	err := workflow.ExecuteActivity(readOptions(ctx, "read "+next), a.ReadRevision,
		knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: next}).Get(ctx, &rev)
	if err != nil || !rev.Found || rev.Generation <= r.st.CandidateGeneration {
		workflow.GetLogger(ctx).Info("ignoring candidate that is not newer", "candidate", next, "current", r.st.Candidate)
		return nil
	}
	if r.st.Phase != api.PhaseResolving && r.st.Capacity.on() {
		r.capacityBack(ctx)
		if r.st.paused() {
			return nil
		}
	}
	if r.st.Phase != api.PhaseResolving && !r.writeTraffic(ctx, r.st.Baseline, "return "+r.st.Candidate+"'s traffic to "+r.st.Stable) {
		return nil
	}
	if r.st.Capacity.on() {
		r.releaseCandidate(ctx)
	}
	r.st.Outcome, r.st.Reason = api.OutcomeSuperseded, "superseded by "+next
	r.end(ctx, api.PhaseSuperseded)
	r.publish(ctx)
	r.flushEvents(ctx)
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	r.drainSignals(ctx)
	carry := state{
		Target: r.st.Target, Candidate: next, Phase: api.PhaseResolving, StartedAt: workflow.Now(ctx),
		Original: r.st.Original, Baseline: r.st.Baseline, Live: r.st.Live, Stable: r.st.Stable,
		Commands: r.st.Commands, Superseded: append(r.st.Superseded, r.st.Candidate), Runs: r.st.Runs,
		EventsEnabled: r.st.EventsEnabled, Capacity: r.st.Capacity.carried(),
	}
	if r.st.Stable == "" {
		// The target's first rollout had no stable to keep: the newer
		// candidate's run reads the traffic as it is, where the first
		// Revision may serve it all by now, and steps from there.
		carry.Original, carry.Baseline, carry.Live = nil, nil, nil
	}
	return workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, RunInput{Input: api.Input{Target: r.st.Target, Candidate: next}, Carry: &carry})
}

func (r *rollout) finish(ctx workflow.Context, outcome api.Outcome, reason string) {
	r.st.Outcome, r.st.Reason = outcome, reason
	phase := api.PhaseSucceeded
	if outcome == api.OutcomeFailed {
		phase = api.PhaseFailed
	}
	r.end(ctx, phase)
}

func (r *rollout) end(ctx workflow.Context, phase api.Phase) {
	r.st.Phase = phase
	r.st.Pause = nil
	r.st.EndedAt = workflow.Now(ctx)
	r.st.HoldUntil = time.Time{}
	if phase == api.PhaseSucceeded {
		r.recordStable(ctx)
	}
	by := ""
	if r.st.Abort != nil {
		by = r.st.Abort.By
	}
	r.emit(ctx, endEvent(phase), r.st.Reason, by)
}

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
	r.finish(ctx, api.OutcomeFailed, r.st.Object.String()+" was deleted during the rollout")
}
