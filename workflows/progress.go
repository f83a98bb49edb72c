package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// emit queues a progress event. One sender goroutine beside the main loop
// sends the queue in order, so consumers see events in the order they
// happened, and a slow sink never holds up the rollout; the workflow waits
// for the queue only before it ends or continues as new. Each event's ID is
// fixed here, so retries repeat it.
func (r *rollout) emit(ctx workflow.Context, typ, reason, by string) {
	if !r.st.EventsEnabled {
		return
	}
	r.st.Seq++
	v := view(&r.st, workflow.Now(ctx))
	p := events.Progress{
		ID:   fmt.Sprintf("%s-%d", r.st.RolloutID, r.st.Seq),
		Type: typ,
		Time: v.AsOf,
		Data: events.ProgressData{
			Namespace: v.Target.Namespace, Kind: v.Target.Kind, Name: v.Target.Name,
			WorkflowID: api.RolloutID(v.Target), Candidate: v.Candidate, Stable: v.Stable,
			Phase: string(v.Phase), Step: v.StepNumber, StepCount: v.StepCount, Weight: v.Weight,
			Traffic: knative.FormatTraffic(v.Live), Reason: reason, By: by, Sequence: r.st.Seq,
		},
	}
	if by == "" {
		p.Data.By = api.BySluice
	}
	if v.Phase == api.PhaseHolding && !v.HoldUntil.IsZero() && v.StepNumber < v.StepCount {
		p.Data.HoldUntil = &v.HoldUntil
		p.Data.GateAfterHold = v.GateAfterHold()
	}
	if c := v.Capacity; c != nil {
		p.Data.Pods = &events.ProgressPods{Candidate: c.CandidatePods, Stable: c.StablePodsNow, StableFrom: c.StablePods}
	}
	r.outbox = append(r.outbox, p)
	if !r.senderStarted {
		r.senderStarted = true
		workflow.Go(ctx, r.sendProgress)
	}
}

// sendProgress sends queued progress events one at a time, in order.
func (r *rollout) sendProgress(ctx workflow.Context) {
	for {
		if err := workflow.Await(ctx, func() bool { return len(r.outbox) > 0 }); err != nil {
			return
		}
		p := r.outbox[0]
		if err := r.sendEvent(ctx, p); err != nil {
			workflow.GetLogger(ctx).Warn("progress event not delivered", "type", p.Type, "id", p.ID, "error", err)
		}
		r.outbox = r.outbox[1:]
	}
}

// progressLocal is the change that sends progress events from a local
// activity, run by the worker inside the workflow task that queued them,
// instead of an activity of their own: Temporal then records one marker in
// a task it completes anyway, where an activity costs a dispatch, three
// events and a workflow task more (a third of a rollout's workflow tasks;
// 13 to 22% of the dev server's CPU per step, docs/benchmarks.md). Still one event at a time, in order, with the ID fixed when it was
// queued: a local activity whose task is lost runs again on replay and
// repeats the same event, as a retried activity does. Rollouts started
// before the change have no marker and keep sending by activity.
const progressLocal = "progress-local"

// sendEvent sends one progress event. The local activity gets one quick
// try, since the workflow task waits for it; if the sink does not answer
// in time, the event and the rest of this run's go by activity with the
// full retries, so a slow or absent sink never holds the rollout again.
func (r *rollout) sendEvent(ctx workflow.Context, p events.Progress) error {
	if workflow.GetVersion(ctx, progressLocal, workflow.DefaultVersion, 1) != workflow.DefaultVersion && !r.sinkSlow {
		err := workflow.ExecuteLocalActivity(emitLocalOptions(ctx), a.EmitProgress, p).Get(ctx, nil)
		if err == nil {
			return nil
		}
		workflow.GetLogger(ctx).Warn("progress event sink did not answer at once; sending by activity from now on", "id", p.ID, "error", err)
		r.sinkSlow = true
	}
	return workflow.ExecuteActivity(emitOptions(ctx, "emit "+p.Type), a.EmitProgress, p).Get(ctx, nil)
}

// flushEvents waits until every queued progress event has been sent or
// given up on.
func (r *rollout) flushEvents(ctx workflow.Context) {
	if len(r.outbox) == 0 {
		return
	}
	// Each event gives up after its ScheduleToClose, so the queue always
	// drains; a timer here would only cost an action.
	_ = workflow.Await(ctx, func() bool { return len(r.outbox) == 0 })
}

// endEvent is the progress event type of a final phase.
func endEvent(p api.Phase) string {
	switch p {
	case api.PhaseSucceeded:
		return events.ProgressSucceeded
	case api.PhaseAborted:
		return events.ProgressAborted
	case api.PhaseRolledBack:
		return events.ProgressRolledBack
	case api.PhaseSuperseded:
		return events.ProgressSuperseded
	}
	return events.ProgressFailed
}
