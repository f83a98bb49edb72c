package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/capacity"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// capacityState is the capacity plan of a rollout (docs/capacity.md): the
// stable's pod count it was derived from, the pods of each stage, and the
// scale bounds the two Revisions' templates set, which the rollout gives
// back when it ends.
type capacityState struct {
	StablePods      int32               `json:"stablePods"`
	Stages          []capacity.Stage    `json:"stages"`
	StableBounds    knative.ScaleBounds `json:"stableBounds,omitzero"`
	CandidateBounds knative.ScaleBounds `json:"candidateBounds,omitzero"`
	// Pods is each Revision's Ready pods as last read.
	CandidatePods int32 `json:"candidatePods,omitempty"`
	StablePodsNow int32 `json:"stablePodsNow,omitempty"`
	// Written is the bounds sluice last wrote on each Revision: a stage
	// finding others there pauses rather than overwrite someone's edit.
	Written map[string]knative.ScaleBounds `json:"written,omitempty"`
}

// on reports whether the rollout stages pods: a plan with its stages.
func (c *capacityState) on() bool { return c != nil && len(c.Stages) > 0 }

// carried is what a superseding candidate's run keeps: the stable's count
// and bounds, which the stable may no longer show.
func (c *capacityState) carried() *capacityState {
	if c == nil {
		return nil
	}
	return &capacityState{StablePods: c.StablePods, StableBounds: c.StableBounds}
}

// last is the bounds sluice last wrote on revision, if it wrote any.
func (c *capacityState) last(revision string) (knative.ScaleBounds, bool) {
	b, ok := c.Written[revision]
	return b, ok
}

// wrote records the bounds sluice wrote on revision.
func (c *capacityState) wrote(revision string, b knative.ScaleBounds) {
	if c.Written == nil {
		c.Written = map[string]knative.ScaleBounds{}
	}
	c.Written[revision] = b
}

// forget drops what sluice wrote on revision: someone else's bounds are
// there now, and resuming writes the stage's over them unchecked.
func (c *capacityState) forget(revision string) { delete(c.Written, revision) }

// saw records the Ready pods last read of the candidate or the stable.
func (c *capacityState) saw(candidate bool, pods int32) {
	if candidate {
		c.CandidatePods = pods
	} else {
		c.StablePodsNow = pods
	}
}

// view is the capacity plan as the status shows it; nil without stages.
func (c *capacityState) view() *api.CapacityStatus {
	if !c.on() {
		return nil
	}
	return &api.CapacityStatus{StablePods: c.StablePods, Stages: c.Stages, CandidatePods: c.CandidatePods, StablePodsNow: c.StablePodsNow}
}

// planCapacity derives the stages from the stable's pods and bounds the
// candidate to the first stage at once, before it brings up more pods than
// that. It reports whether the rollout goes on.
func (r *rollout) planCapacity(ctx workflow.Context, res activities.Resolved) bool {
	p := r.st.Policy.Capacity
	if r.st.Capacity == nil {
		// A superseding candidate keeps the first one's count and bounds:
		// the stable may be scaled down by now.
		r.st.Capacity = &capacityState{StablePods: max(res.StablePods, 1), StableBounds: res.StableBounds}
	}
	c := r.st.Capacity
	c.CandidateBounds, c.Stages = res.CandidateBounds, nil
	stages, err := r.st.Policy.Stages(c.StablePods)
	if err != nil {
		r.finish(ctx, api.OutcomeFailed, fmt.Sprintf("capacity plan for %s at %d pods: %v", r.st.Stable, c.StablePods, err))
		return false
	}
	c.Stages = stages
	first := stages[0]
	if p.Strategy == capacity.Resource {
		// Never above the stable's count: its pods make room for the
		// candidate's first ones before those come.
		if !r.setScale(ctx, r.st.Stable, knative.Pods(max(first.Stable, 1))) {
			return false
		}
		first.Candidate = min(first.Candidate, c.StablePods-max(first.Stable, 1))
	}
	if p.StepsFromPods {
		hold := r.st.Policy.Steps[0].Hold
		r.st.Policy.Steps = make([]config.Step, len(stages))
		for i, s := range stages {
			r.st.Policy.Steps[i] = config.Step{Weight: s.Weight, Hold: hold}
		}
		if total := r.st.Policy.TotalHold(); total >= r.st.Policy.Deadline {
			r.finish(ctx, api.OutcomeFailed, fmt.Sprintf("the %d stages derived from %s's %d pods hold %s in all, longer than the rollout's deadline of %s: raise %s or shorten %s",
				len(stages), r.st.Stable, c.StablePods, total, r.st.Policy.Deadline, config.AnnotationDeadline, config.AnnotationHold))
			return false
		}
	}
	return r.setScale(ctx, r.st.Candidate, knative.Pods(max(first.Candidate, 1)))
}

// setScale writes one Revision's bounds. A refusal ends the rollout's
// progress the way a refused traffic write does: paused, with the API
// server's reason.
func (r *rollout) setScale(ctx workflow.Context, revision string, b knative.ScaleBounds) bool {
	return r.writeScale(ctx, revision, b, false)
}

// stageScale writes one Revision's bounds for a stage, unless someone else
// changed them since sluice last wrote them: that pauses, like traffic
// drift, and resume writes the stage's bounds over theirs.
func (r *rollout) stageScale(ctx workflow.Context, revision string, b knative.ScaleBounds) bool {
	return r.writeScale(ctx, revision, b, true)
}

func (r *rollout) writeScale(ctx workflow.Context, revision string, b knative.ScaleBounds, checked bool) bool {
	c := r.st.Capacity
	in := activities.ScaleInput{RevisionRef: knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: revision}, Bounds: b}
	if last, ok := c.last(revision); ok && checked {
		in.Last = &last
	}
	summary := fmt.Sprintf("scale %s to min %s max %s", revision, orNone(b.Min), orNone(b.Max))
	if err := workflow.ExecuteActivity(readOptions(ctx, summary), a.SetScale, in).Get(ctx, nil); err != nil {
		reason := summary + " failed: " + errorMessage(err) + "; fix it, then resume to retry, or abort to roll back"
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == activities.ErrScaleDrift {
			c.forget(revision)
			reason = fmt.Sprintf("%s: %s; resume to write sluice's bounds over them, or abort to roll back", summary, errorMessage(err))
		}
		r.st.pauseFor(pausedByError, reason, workflow.Now(ctx))
		r.emit(ctx, events.ProgressPaused, reason, "")
		return false
	}
	c.wrote(revision, b)
	return true
}

func orNone(v string) string {
	if v == "" {
		return "(template default)"
	}
	return v
}

// awaitPods waits up to the stage timeout for a Revision's Ready pods and
// reports whether it has them; if not, it has paused or rolled back, as
// the policy says.
func (r *rollout) awaitPods(ctx workflow.Context, revision string, want int32, atMost bool, what string) bool {
	p := r.st.Policy.Capacity
	in := activities.AwaitPodsInput{RevisionRef: knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: revision}, Want: want, AtMost: atMost, For: p.StageTimeout, Until: workflow.Now(ctx).Add(p.StageTimeout)}
	actx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	fut := workflow.ExecuteActivity(watchOptions(actx, p.StageTimeout, podsSummary(revision, want, atMost)), a.AwaitPods, in)
	if r.st.Phase != api.PhaseRollingBack {
		// An abort, a pause or a newer candidate does not wait for the
		// pods: the main loop acts on it, and the stage runs again later.
		r.publish(ctx)
		paused := r.st.paused()
		_ = workflow.Await(ctx, func() bool { return fut.IsReady() || r.interrupted() || r.st.paused() != paused })
		if !fut.IsReady() {
			return false
		}
	}
	var st knative.RevisionState
	err := fut.Get(ctx, &st)
	r.st.Capacity.saw(revision == r.st.Candidate, st.Pods)
	if err == nil && (st.Pods >= want && !atMost || st.Pods <= want && atMost) {
		return true
	}
	why := fmt.Sprintf("%s: %s has %d of the %d Ready pods it needs after %s", what, revision, st.Pods, want, p.StageTimeout)
	if atMost {
		why = fmt.Sprintf("%s: %s still runs %d pods after %s, more than the %d that leave room", what, revision, st.Pods, p.StageTimeout, want)
	}
	switch {
	case err != nil:
		why = fmt.Sprintf("%s: cannot read the pods of %s: %s", what, revision, errorMessage(err))
	case !st.Found:
		why = fmt.Sprintf("%s: %s was deleted", what, revision)
	case st.Failed:
		why += fmt.Sprintf(" (Knative: %s %s)", st.Reason, st.Message)
	case st.Message != "":
		why += fmt.Sprintf(" (Knative: %s)", st.Message)
	}
	if r.st.Phase == api.PhaseRollingBack {
		// The rollback goes on: the stable without all its pods is still
		// better than a candidate being rolled back. Say so.
		r.st.Reason += "; " + why
		return false
	}
	if p.RollbackOnTimeout || st.Failed || !st.Found {
		r.startRollback(api.OutcomeRolledBack, why)
		return false
	}
	why += "; resume to wait again, or abort to roll back"
	r.st.pauseFor(pausedByError, why, workflow.Now(ctx))
	r.emit(ctx, events.ProgressPaused, why, "")
	return false
}

// stageUp gets step i's pods before its traffic is written, and reports
// whether the traffic may move. With Availability the candidate's pods come
// up first (the stable releases its own once the traffic has moved) — but
// only once the stable runs no more than the last stage left it, so the
// surge is never spent twice (a short hold, or a promote, can come before
// the autoscaler has scaled it down); that wait also reads the stable's
// pods for the status. With
// Resource the stable's pods make room first — but a Revision that still
// has traffic keeps at least one pod, so at the last stage the candidate
// takes the traffic one pod short and gets its last pod once the stable
// has gone.
func (r *rollout) stageUp(ctx workflow.Context, i int) bool {
	c := r.st.Capacity
	s := c.Stages[i]
	what := fmt.Sprintf("stage %d of %d", i+1, len(c.Stages))
	want := s.Candidate
	if r.st.Policy.Capacity.Strategy == capacity.Availability && i > 0 {
		if left := c.Stages[i-1].Stable; !r.awaitPods(ctx, r.st.Stable, left, true, what) {
			return false
		}
	}
	if r.st.Policy.Capacity.Strategy == capacity.Resource {
		keep := max(s.Stable, 1)
		if !r.stageScale(ctx, r.st.Stable, knative.Pods(keep)) || !r.awaitPods(ctx, r.st.Stable, keep, true, what) {
			return false
		}
		want = min(want, c.StablePods-keep)
	}
	return r.stageScale(ctx, r.st.Candidate, knative.Pods(want)) && r.awaitPods(ctx, r.st.Candidate, want, false, what)
}

// stageDown releases the stable's pods once step i's traffic is live. At the
// last stage the stable gets its template's bounds back: with no traffic,
// Knative scales it down as it normally would; with Resource the candidate
// gets its last pods only once the stable's are gone.
func (r *rollout) stageDown(ctx workflow.Context, i int) bool {
	c := r.st.Capacity
	s := c.Stages[i]
	resource := r.st.Policy.Capacity.Strategy == capacity.Resource
	switch {
	case s.Stable == 0:
		// Knative ignores a Revision's min-scale once no route names it
		// (routing state "reserve") and then scales it down as it normally
		// would; the template's bounds come back only then, or a min-scale
		// of 8 would bring 8 pods back meanwhile. A stable still named by a
		// tag stays routed and keeps what its template asks, as without
		// sluice.
		routed := r.routes(r.st.Stable)
		if !routed {
			r.awaitReserve(ctx, r.st.Stable)
		}
		if !r.setScale(ctx, r.st.Stable, c.StableBounds) {
			return false
		}
		if resource {
			what := fmt.Sprintf("stage %d of %d", i+1, len(c.Stages))
			if !routed {
				r.awaitGone(ctx, r.st.Stable, what)
			}
			return r.stageScale(ctx, r.st.Candidate, knative.Pods(s.Candidate)) && r.awaitPods(ctx, r.st.Candidate, s.Candidate, false, what)
		}
		return true
	case !resource:
		return r.stageScale(ctx, r.st.Stable, knative.Pods(s.Stable))
	}
	return true
}

// routes reports whether the traffic sluice last wrote names revision.
func (r *rollout) routes(revision string) bool {
	for _, t := range r.st.Live {
		if t.RevisionName == revision {
			return true
		}
	}
	return false
}

// awaitReserve waits up to the stage timeout for Knative to put a Revision
// no route names in reserve; the rollout goes on either way.
func (r *rollout) awaitReserve(ctx workflow.Context, revision string) {
	p := r.st.Policy.Capacity
	in := activities.AwaitReserveInput{RevisionRef: knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: revision}, For: p.StageTimeout, Until: workflow.Now(ctx).Add(p.StageTimeout)}
	_ = workflow.ExecuteActivity(watchOptions(ctx, p.StageTimeout, "await "+revision+" in reserve"), a.AwaitReserve, in).Get(ctx, nil)
}

// awaitGone waits up to the stage timeout for a Revision in reserve to run
// no pods, so the candidate's last pod never runs beside it. Knative scales
// a Revision in reserve to zero only where scale-to-zero is on; where it is
// off, or the wait runs out, the candidate gets its last pod anyway — its
// template asks for it when the rollout ends — and the worker's log says so.
func (r *rollout) awaitGone(ctx workflow.Context, revision, what string) {
	p := r.st.Policy.Capacity
	in := activities.AwaitPodsInput{RevisionRef: knative.RevisionRef{Namespace: r.st.Target.Namespace, Name: revision}, Want: 0, AtMost: true, For: p.StageTimeout, Until: workflow.Now(ctx).Add(p.StageTimeout)}
	var st knative.RevisionState
	err := workflow.ExecuteActivity(watchOptions(ctx, p.StageTimeout, podsSummary(revision, 0, true)), a.AwaitPods, in).Get(ctx, &st)
	if err == nil {
		r.st.Capacity.saw(false, st.Pods)
	}
	if err != nil || st.Found && st.Pods > 0 {
		workflow.GetLogger(ctx).Warn(what+": the stable still runs pods in reserve (Knative scales it to zero only with scale-to-zero on); the candidate gets its last pod anyway",
			"stable", revision, "pods", st.Pods, "waited", p.StageTimeout, "candidate", r.st.Candidate)
	}
}

func podsSummary(revision string, want int32, atMost bool) string {
	if atMost {
		return fmt.Sprintf("await %s down to %d pods", revision, want)
	}
	return fmt.Sprintf("await %d Ready pods of %s", want, revision)
}

// capacityBack restores the stable's bounds and waits for its pods before
// a rollback moves its traffic back: capacity for the stable comes first.
func (r *rollout) capacityBack(ctx workflow.Context) {
	c := r.st.Capacity
	// A stage that did not get its pods (or was interrupted before its
	// traffic moved) left the candidate bounded above what its live share
	// needs: those pods serve nothing, and go before the stable's return.
	for _, s := range c.Stages {
		if s.Weight != r.st.Weight {
			continue
		}
		if last, ok := c.last(r.st.Candidate); ok && last != knative.Pods(s.Candidate) && !r.setScale(ctx, r.st.Candidate, knative.Pods(s.Candidate)) {
			return
		}
		break
	}
	if !r.setScale(ctx, r.st.Stable, c.StableBounds) {
		return
	}
	r.awaitPods(ctx, r.st.Stable, c.StablePods, false, "rollback")
}

// releaseCandidate gives the candidate its template's bounds back: at the
// end of a rollout it succeeded with, or after a rollback or a newer
// candidate took its traffic. Knative applies a Revision's min-scale until
// it has put it in reserve, and that can come after the traffic shows in
// the Route's status: a template's min-scale of 8 given back before then
// would bring 8 pods of the candidate up beside the stable's, and keep them
// for the autoscaler's scale-down window. So a candidate no route names
// gets its bounds only once it is in reserve (or the stage timeout passed).
func (r *rollout) releaseCandidate(ctx workflow.Context) {
	if !r.routes(r.st.Candidate) && !followsLatest(r.st.Live) {
		r.awaitReserve(ctx, r.st.Candidate)
	}
	r.setScale(ctx, r.st.Candidate, r.st.Capacity.CandidateBounds)
}

// followsLatest reports whether a traffic list has a latestRevision target,
// which routes the newest Ready Revision — the candidate — whatever its
// share: Knative keeps it routed, and its template's bounds apply at once,
// as they would without sluice.
func followsLatest(traffic []servingTraffic) bool {
	for _, t := range traffic {
		if knative.IsLatest(t) {
			return true
		}
	}
	return false
}
