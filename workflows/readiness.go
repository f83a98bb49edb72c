package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// ReadinessPoll is how long the workflow waits before it watches the
// candidate again when a watch ended early (it could not watch). The
// candidate's event wakes it sooner.
const ReadinessPoll = 10 * time.Second

// waitReady waits for the candidate to be Ready — told by its CloudEvent or
// seen by the rollout's own watch, whichever comes first — and moves on to
// the first step, or rolls back if it failed, vanished or took too long.
func (r *rollout) waitReady(ctx workflow.Context) {
	var (
		rev knative.RevisionState
		err error
	)
	ref := knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: r.st.Candidate}
	asked := workflow.Now(ctx)
	from := api.ReadinessFromEvent
	if told := r.st.Told; told != nil {
		rev = told.RevisionState()
	} else {
		var ok bool
		if rev, err, ok = r.awaitRevision(ctx, ref); !ok {
			return // interrupted, or told by an event: the main loop decides what next
		}
		from = api.ReadinessFromWatch
	}
	switch {
	case err != nil:
		r.startRollback(api.OutcomeFailed, "cannot read the candidate Revision: "+errorMessage(err))
		return
	case !rev.Found:
		r.st.ReadinessFrom = from
		r.startRollback(api.OutcomeFailed, "candidate Revision "+r.st.Candidate+" was deleted")
		return
	case rev.Ready:
		r.st.CandidateReady, r.st.ReadinessFrom = true, from
		if !r.openPreview(ctx) {
			return
		}
		if r.analysing() && !r.st.Analysis.Started && !r.beforeStart(ctx) {
			return
		}
		r.st.Phase = api.PhaseStepping
		return
	case rev.Failed:
		r.st.ReadinessFrom = from
		r.startRollback(api.OutcomeRolledBack, fmt.Sprintf("candidate Revision %s failed: %s: %s", r.st.Candidate, rev.Reason, rev.Message))
		return
	}
	left := r.st.ReadyDeadline.Sub(workflow.Now(ctx))
	if left <= 0 {
		r.startRollback(api.OutcomeRolledBack, fmt.Sprintf("candidate Revision %s was not Ready within the progress deadline of %s", r.st.Candidate, r.st.Policy.ProgressDeadline))
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
func (r *rollout) awaitRevision(ctx workflow.Context, ref knative.RevisionRef) (rev knative.RevisionState, err error, ok bool) {
	wait := min(max(r.st.ReadyDeadline.Sub(workflow.Now(ctx)), time.Second), readinessSpan)
	r.publish(ctx)
	actx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	grace := eventGrace
	if r.st.Undo != nil {
		// An undo's Revision is usually Ready already: no event will come
		// to tell it, and the undo must not wait for one.
		grace = 0
	}
	fut := workflow.ExecuteActivity(awaitOptions(actx, wait, "wait for "+ref.Name+" to be Ready"), a.AwaitRevision,
		activities.AwaitRevisionInput{RevisionRef: ref, For: wait, Grace: grace})
	paused := r.st.paused()
	_ = workflow.Await(ctx, func() bool {
		return fut.IsReady() || r.st.Told != nil || r.interrupted() || r.st.paused() != paused || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
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
