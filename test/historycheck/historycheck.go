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
// with its cause and message.
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
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					return nil, fmt.Errorf("history of %s/%s: %w", id, run, err)
				}
				if ev.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED {
					continue
				}
				a := ev.GetWorkflowTaskFailedEventAttributes()
				out = append(out, fmt.Sprintf("%s (run %s) event %d: WorkflowTaskFailed %s: %s",
					id, run, ev.GetEventId(), a.GetCause(), firstLine(a.GetFailure().GetMessage())))
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
