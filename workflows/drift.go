package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// Traffic changed outside sluice ("drift") is noticed two ways: a write whose
// expected list is no longer live (ApplyTraffic's check), and, while a step
// holds, a watch on the traffic object that answers as soon as its spec
// changes — so a hand edit pauses the rollout at once, not a hold later.

// trafficWatch is the running watch of a hold.
type trafficWatch struct {
	fut     workflow.Future
	cancel  workflow.CancelFunc
	started time.Time
}

// driftSpan bounds one watch: a long hold costs one activity per span.
const driftSpan = 10 * time.Minute

// driftRetry is how long after a watch that ended early (it could not
// watch) the next one starts.
const driftRetry = 30 * time.Second

// driftWatchMin is the shortest hold left that gets a watch: it costs an
// activity, and in a shorter hold the next step's write notices an edit
// about as soon.
const driftWatchMin = 30 * time.Second

// startWatch starts the hold's drift watch unless one runs, it is not due,
// or the hold has less than driftWatchMin left. It returns how long the
// caller may wait before it must look again (0: no limit from here).
func (r *rollout) startWatch(ctx workflow.Context, left time.Duration) time.Duration {
	if r.watch != nil || left < driftWatchMin {
		return 0
	}
	now := workflow.Now(ctx)
	if now.Before(r.watchAfter) {
		return r.watchAfter.Sub(now)
	}
	wctx, cancel := workflow.WithCancel(ctx)
	fut := workflow.ExecuteActivity(watchOptions(wctx, driftSpan, "watch "+r.st.Object.String()+" for traffic changes"),
		a.AwaitTrafficChange, activities.AwaitTrafficInput{Object: r.st.Object, Expected: r.st.Live, For: driftSpan})
	r.watch = &trafficWatch{fut: fut, cancel: cancel, started: now}
	return 0
}

// settleWatch acts on a drift watch that answered, and cancels one that is
// no longer wanted: the hold ended, or the rollout paused or ended.
func (r *rollout) settleWatch(ctx workflow.Context) {
	w := r.watch
	if w == nil {
		return
	}
	if !w.fut.IsReady() {
		if r.st.Phase != api.PhaseHolding || r.st.paused() || r.interrupted() {
			w.cancel()
			r.watch = nil
		}
		return
	}
	r.watch = nil
	var change activities.TrafficChange
	err := w.fut.Get(ctx, &change)
	now := workflow.Now(ctx)
	var appErr *temporal.ApplicationError
	switch {
	case errors.As(err, &appErr) && appErr.Type() == activities.ErrTargetNotFound, err == nil && change.Gone:
		r.st.DeleteHints++ // checkTarget confirms and ends the rollout
	case err != nil:
		workflow.GetLogger(ctx).Warn("traffic watch failed; it starts again later", "error", err)
		r.watchAfter = now.Add(driftRetry)
	case change.Changed && r.st.Phase == api.PhaseHolding && !r.st.paused():
		r.pauseForDrift(ctx, fmt.Sprintf(
			"traffic on %s was changed outside sluice during the hold: expected %s, found %s; resume to take the live traffic as the new starting point, or abort to roll back (a GitOps tool that re-applies spec.traffic from Git does this: see docs/gitops.md)",
			r.st.Object, knative.FormatTraffic(r.st.Live), knative.FormatTraffic(change.Found)))
	case now.Sub(w.started) < driftSpan-minTimeout:
		r.watchAfter = now.Add(driftRetry) // it could not watch: try again later
	}
}

// pauseForDrift pauses the rollout because someone else changed its traffic.
func (r *rollout) pauseForDrift(ctx workflow.Context, reason string) {
	r.st.pauseFor(pausedByDrift, reason, workflow.Now(ctx))
	r.emit(ctx, events.ProgressPaused, reason, api.ByDrift)
}

// rebase makes the live traffic the rollout's new starting point, after an
// operator resumed a rollout whose traffic someone changed: their targets
// and tags are kept, the candidate's next step is the first above its live
// share, and a rollback restores their list with the candidate's share back
// on the stable Revision.
func (r *rollout) rebase(ctx workflow.Context) {
	var live activities.LiveTraffic
	err := workflow.ExecuteActivity(readOptions(ctx, "read the live traffic of "+r.st.Object.String()), a.ReadTraffic, r.st.Object).Get(ctx, &live)
	if err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == activities.ErrTargetNotFound {
			r.finish(ctx, api.OutcomeFailed, errorMessage(err))
			return
		}
		// Rebase stays set: resuming tries again.
		r.st.pauseFor(pausedByError, "cannot read the live traffic to resume from: "+errorMessage(err)+"; resume to try again", workflow.Now(ctx))
		return
	}
	r.st.Rebase = false
	resolveTo := r.st.Stable
	if r.st.CandidateReady {
		resolveTo = r.st.Candidate // Knative routes latestRevision targets to it now
	}
	base := pinLatest(live.Spec, live.Routed, resolveTo)
	r.st.Live = knative.CloneTraffic(live.Spec)
	r.st.Baseline = r.withPreview(trafficAt(base, r.st.Stable, r.st.Candidate, 0), "")
	r.st.Original = knative.CloneTraffic(r.st.Baseline)
	r.st.PromoteRequested = false
	r.st.HoldUntil = time.Time{}
	for i := range r.st.StepRuns {
		r.st.StepRuns[i].Skipped = false
	}
	r.st.Phase = api.PhaseStepping
	r.st.Step = 0
	r.startFrom(ctx, candidateShare(base, r.st.Stable, r.st.Candidate),
		"the traffic an operator left gives "+r.st.Candidate+" all of it")
	if !r.st.CandidateReady && !r.st.Phase.Done() {
		r.st.Phase = api.PhaseWaitingReady
	}
}

// latestPinnedNote tells the user that a rollback left a target that
// followed the latest Revision pinned by name, and how to undo that.
func latestPinnedNote(t knative.TargetRef, o knative.ObjectRef, stable, candidate string) string {
	how := fmt.Sprintf("kn service update %s -n %s --traffic @latest=100", o.Name, o.Namespace)
	if o.Kind == knative.KindRoute {
		how = fmt.Sprintf(`kubectl patch route %s -n %s --type merge -p '{"spec":{"traffic":[{"configurationName":"%s","latestRevision":true,"percent":100}]}}'`,
			o.Name, o.Namespace, t.Name)
	}
	return fmt.Sprintf("traffic that followed the latest Revision now names %s: the latest Revision, %s, serves none of it. To follow the latest Revision again: %s",
		stable, candidate, how)
}
