package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/events"
)

// versionEvents gates what came with CloudEvents: progress events, the
// traffic and delete hints, and verification woken by hints. Histories
// recorded before it replay on the old path.
const (
	versionChangeEvents = "cloudevents"
	versionEvents       = workflow.Version(1)
	// versionPublishOnWait also publishes the state (search attributes,
	// current details) whenever the workflow starts to wait, so a rollout
	// at a gate shows AwaitingPromotion in the UI and in `sluice list`.
	versionPublishOnWait = workflow.Version(2)
	// versionApply writes and verifies each traffic list in one activity
	// (ApplyTraffic, which watches the object instead of polling), waits for
	// the candidate with one watching activity (AwaitRevision) instead of
	// re-reading it every ReadinessPoll, and no longer publishes the passing
	// Stepping phase: one search-attribute upsert per step, when the hold
	// begins.
	versionApply = workflow.Version(3)
	// versionAnalysis runs the policy's analysis: checks and webhooks as
	// activities during holds, at the gate before 100%, before the first
	// step and after the end. Rollouts without analysis make the same
	// commands as under versionApply.
	versionAnalysis = workflow.Version(4)
	// versionLive follows the live traffic: a watch during each hold pauses
	// on a hand edit at once, resume after drift re-reads the live traffic
	// and goes on from it (ReadTraffic), and a write Knative refuses for a
	// reason outside the traffic list pauses instead of rolling back.
	versionLive   = workflow.Version(5)
	versionLatest = versionLive
)

// emit queues a progress event. One sender goroutine beside the main loop
// sends the queue in order, so consumers see events in the order they
// happened, and a slow sink never holds up the rollout; the workflow waits
// for the queue only before it ends or continues as new. Each event's ID is
// fixed here, so retries repeat it.
func (r *rollout) emit(ctx workflow.Context, typ, reason, by string) {
	if r.version < versionEvents || !r.st.EventsEnabled {
		return
	}
	r.st.Seq++
	step := r.shownStep()
	p := events.Progress{
		ID:   fmt.Sprintf("%s-%d", r.st.RolloutID, r.st.Seq),
		Type: typ,
		Time: workflow.Now(ctx),
		Data: events.ProgressData{
			Namespace: r.st.Target.Namespace, Kind: r.st.Target.Kind, Name: r.st.Target.Name,
			WorkflowID: WorkflowID(r.st.Target), Candidate: r.st.Candidate, Stable: r.st.Stable,
			Phase: string(r.st.Phase), Step: step, StepCount: len(r.st.Steps), Weight: r.st.Weight,
			Traffic: activities.FormatTraffic(r.st.Live), Reason: reason, By: by, Sequence: r.st.Seq,
		},
	}
	if by == "" {
		p.Data.By = "sluice"
	}
	r.outbox = append(r.outbox, p)
	if !r.senderStarted {
		r.senderStarted = true
		workflow.Go(ctx, r.sendProgress)
	}
}

// shownStep is the step (from 1) events and webhooks name: 0 until the
// candidate has traffic.
func (r *rollout) shownStep() int {
	if r.st.Weight > 0 || r.st.Phase == PhaseHolding {
		return r.st.Step + 1
	}
	return 0
}

// sendProgress sends queued progress events one at a time, in order.
func (r *rollout) sendProgress(ctx workflow.Context) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    15 * time.Second,
		ScheduleToCloseTimeout: 2 * time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 20 * time.Second},
	})
	for {
		if err := workflow.Await(ctx, func() bool { return len(r.outbox) > 0 }); err != nil {
			return
		}
		p := r.outbox[0]
		opts := workflow.GetActivityOptions(actx)
		opts.Summary = "emit " + p.Type
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(actx, opts), a.EmitProgress, p).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("progress event not delivered", "type", p.Type, "id", p.ID, "error", err)
		}
		r.outbox = r.outbox[1:]
	}
}

// flushEvents waits until every queued progress event has been sent or
// given up on.
func (r *rollout) flushEvents(ctx workflow.Context) {
	if len(r.outbox) == 0 {
		return
	}
	if r.version >= versionApply {
		// Each event gives up after its ScheduleToClose, so the queue always
		// drains; a timer here would only cost an action.
		_ = workflow.Await(ctx, func() bool { return len(r.outbox) == 0 })
		return
	}
	_, _ = workflow.AwaitWithTimeout(ctx, 5*time.Minute, func() bool { return len(r.outbox) == 0 })
}

// endEvent is the progress event type of a final phase.
func endEvent(p Phase) string {
	switch p {
	case PhaseSucceeded:
		return events.ProgressSucceeded
	case PhaseAborted:
		return events.ProgressAborted
	case PhaseRolledBack:
		return events.ProgressRolledBack
	case PhaseSuperseded:
		return events.ProgressSuperseded
	}
	return events.ProgressFailed
}
