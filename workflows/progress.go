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
)

// emit sends a progress event without holding up the rollout: the send runs
// beside the main loop, and the workflow waits for sends only before it
// ends or continues as new. Its ID is fixed here, so retries repeat it.
func (r *rollout) emit(ctx workflow.Context, typ, reason, by string) {
	if r.version < versionEvents || !r.st.EventsEnabled {
		return
	}
	r.st.Seq++
	step := 0
	if r.st.Weight > 0 || r.st.Phase == PhaseHolding {
		step = r.st.Step + 1
	}
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
	r.sending++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { r.sending-- }()
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			Summary:                "emit " + typ,
			StartToCloseTimeout:    15 * time.Second,
			ScheduleToCloseTimeout: 2 * time.Minute,
			RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 20 * time.Second},
		})
		if err := workflow.ExecuteActivity(actx, a.EmitProgress, p).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("progress event not delivered", "type", typ, "id", p.ID, "error", err)
		}
	})
}

// flushEvents waits, for at most the send timeout, until every progress
// event has been sent or given up on.
func (r *rollout) flushEvents(ctx workflow.Context) {
	if r.sending == 0 {
		return
	}
	_, _ = workflow.AwaitWithTimeout(ctx, 3*time.Minute, func() bool { return r.sending == 0 })
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
