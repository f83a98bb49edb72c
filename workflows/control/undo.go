package control

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows"
)

// UndoStarted is what Undo did: started an undo run, or aborted the
// rollout that was running (Aborted, with its answer in Message).
type UndoStarted struct {
	RunID   string
	Aborted bool
	Message string
}

// Undo gives the target's traffic back, at once, to the Revision that had
// 100% of it before (to, if named): a run of its own, recorded in the
// target's history like a rollout. A rollout still running is aborted
// instead — its rollback is the undo — unless to names another Revision
// than the one it would go back to.
func (c *Client) Undo(ctx context.Context, target knative.TargetRef, to, reason string) (UndoStarted, error) {
	target = target.In(c.Cluster)
	if reason == "" {
		return UndoStarted{}, errors.New("undo: give a reason; it is kept in the target's history")
	}
	if err := c.awaitFinishing(ctx, target); err != nil {
		return UndoStarted{}, err
	}
	running, err := c.running(ctx, target)
	if err != nil {
		return UndoStarted{}, err
	}
	if running {
		st, err := c.Status(ctx, target)
		if err != nil {
			return UndoStarted{}, err
		}
		if to != "" && to != st.Stable {
			return UndoStarted{}, &RejectedError{Reason: fmt.Sprintf(
				"undo rejected: the rollout of %s on %s is running and would go back to %s, not %s; abort it first (sluice abort %s --reason …), then undo --to %s",
				st.Candidate, target, st.Stable, to, target.Name, to)}
		}
		msg, err := c.Send(ctx, target, api.CommandAbort, "undo: "+reason)
		if err != nil {
			return UndoStarted{}, err
		}
		return UndoStarted{Aborted: true, Message: msg}, nil
	}
	opts := client.StartWorkflowOptions{
		ID:                       api.RolloutID(target),
		TaskQueue:                c.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		StaticSummary:            undoSummary(target, to),
		StaticDetails:            fmt.Sprintf("Undo requested by %s: %s", c.Identity, reason),
		TypedSearchAttributes:    workflows.StartAttributes(target, to),
	}
	run, err := c.Temporal.ExecuteWorkflow(ctx, opts, api.RolloutWorkflow,
		api.Input{Target: target, Candidate: to, RequestedBy: c.Identity, Undo: &api.Undo{Reason: reason}})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &started):
		return UndoStarted{}, fmt.Errorf("a rollout of %s started while the undo was asked for; see sluice status %s, then undo again", target, target.Name)
	case err != nil:
		return UndoStarted{}, fmt.Errorf("start the undo of %s: %w", target, err)
	}
	return UndoStarted{RunID: run.GetRunID()}, nil
}

// running reports whether the target's rollout workflow is running.
func (c *Client) running(ctx context.Context, target knative.TargetRef) (bool, error) {
	latest, ok, err := c.Latest(ctx, target)
	return ok && latest.Running(), err
}

func undoSummary(t knative.TargetRef, to string) string {
	if to == "" {
		return t.Name + ": undo (back to the previous Revision)"
	}
	return t.Name + ": undo (back to " + to + ")"
}
