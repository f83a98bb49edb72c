// Package historycheck holds the invariants every rollout's Temporal history
// must keep, checked after each end-to-end and integration test: a failed
// workflow task is never an outcome (it leaves the rollout stuck, its query
// and commands refused, until a worker with a fix replays it).
package historycheck

import (
	"context"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// WorkflowTaskFailures lists, for every run of every workflow the visibility
// query matches ("" for all), each WorkflowTaskFailed event in its history
// with its cause and message — but for the cause UnhandledCommand: that is
// the server refusing a completion because a signal arrived while the
// workflow completed (a new Revision's, say), so that the next task hands it
// over; it is Temporal's protocol, not a failure of the workflow's code.
func WorkflowTaskFailures(ctx context.Context, c client.Client, query string) ([]string, error) {
	var out []string
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list workflows: %w", err)
		}
		for _, ex := range resp.Executions {
			id, run := ex.Execution.WorkflowId, ex.Execution.RunId
			it := c.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			var recent []string // the types of the last few events, to say what led up to a failure
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					return nil, fmt.Errorf("history of %s/%s: %w", id, run, err)
				}
				if a := ev.GetWorkflowTaskFailedEventAttributes(); ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED &&
					a.GetCause() != enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND {
					out = append(out, fmt.Sprintf("%s (run %s) event %d: WorkflowTaskFailed %s: %s (after %s)",
						id, run, ev.GetEventId(), a.GetCause(), firstLine(a.GetFailure().GetMessage()), strings.Join(recent, ", ")))
				}
				recent = append(recent, strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_"))
				if len(recent) > 8 {
					recent = recent[1:]
				}
			}
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			return out, nil
		}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
