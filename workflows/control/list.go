package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// Summary is one rollout run as the visibility store lists it.
type Summary struct {
	WorkflowID string    `json:"workflowId"`
	RunID      string    `json:"runId"`
	Target     string    `json:"target"`
	Candidate  string    `json:"candidate"`
	Stable     string    `json:"stable,omitempty"`
	Phase      string    `json:"phase"`
	Outcome    string    `json:"outcome,omitempty"`
	Step       int64     `json:"step"`
	Weight     int64     `json:"weight"`
	Status     string    `json:"status"`
	StartedAt  time.Time `json:"startedAt"`
	ClosedAt   time.Time `json:"closedAt,omitzero"`
}

// Duration is how long the run took, or has taken so far at now.
func (s Summary) Duration(now time.Time) time.Duration {
	if s.ClosedAt.IsZero() {
		return now.Sub(s.StartedAt)
	}
	return s.ClosedAt.Sub(s.StartedAt)
}

// Filter narrows a listing; empty fields match everything.
type Filter struct {
	Namespace string
	Target    string // namespace/kind/name
	Phase     string
	// Running keeps only rollouts still running.
	Running bool
	Limit   int
}

// Query is the visibility query for a filter, on sluice's search attributes.
func (f Filter) Query() string {
	clauses := []string{api.AttrTarget.GetName() + " IS NOT NULL", "WorkflowType = '" + api.RolloutWorkflow + "'"}
	add := func(attr, v string) {
		if v != "" {
			clauses = append(clauses, fmt.Sprintf("%s = '%s'", attr, strings.ReplaceAll(v, "'", "")))
		}
	}
	add(api.AttrNamespace.GetName(), f.Namespace)
	add(api.AttrTarget.GetName(), f.Target)
	add(api.AttrPhase.GetName(), f.Phase)
	if f.Running {
		clauses = append(clauses, "ExecutionStatus = 'Running'")
	}
	return strings.Join(clauses, " AND ")
}

// List returns rollouts, newest first.
func (c *Client) List(ctx context.Context, f Filter) ([]Summary, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []Summary
	var token []byte
	for len(out) < limit {
		resp, err := c.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: f.Query(), PageSize: int32(min(limit, 1000)), NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("list rollouts (%s): %w", f.Query(), err)
		}
		for _, e := range resp.Executions {
			out = append(out, summarize(e))
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// History returns every run of a target's rollouts, newest first: one per
// candidate (a superseded one, then the one that superseded it, ...).
func (c *Client) History(ctx context.Context, target knative.TargetRef, limit int) ([]Summary, error) {
	return c.List(ctx, Filter{Target: api.TargetAttr(target.In(c.Cluster)), Limit: limit})
}

// Running reports whether the run had not closed when it was read.
func (s Summary) Running() bool {
	return s.Status == strings.TrimPrefix(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING.String(), "WORKFLOW_EXECUTION_STATUS_")
}

// Latest returns the target's newest run, running or closed, as Temporal's
// own record of the workflow has it — not the visibility store, which on
// Temporal's production topology shows a run some time after it starts or
// ends. ok is false when the target has no run (or its last one is past
// retention).
func (c *Client) Latest(ctx context.Context, target knative.TargetRef) (s Summary, ok bool, err error) {
	target = target.In(c.Cluster)
	d, err := c.Temporal.DescribeWorkflowExecution(ctx, api.RolloutID(target), "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return Summary{}, false, nil
	case err != nil:
		return Summary{}, false, fmt.Errorf("describe the rollout of %s: %w", target, err)
	}
	return summarize(d.GetWorkflowExecutionInfo()), true, nil
}

func summarize(e *workflowpb.WorkflowExecutionInfo) Summary {
	s := Summary{
		WorkflowID: e.GetExecution().GetWorkflowId(),
		RunID:      e.GetExecution().GetRunId(),
		Status:     strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"),
		StartedAt:  e.GetStartTime().AsTime(),
	}
	if e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && e.GetCloseTime() != nil {
		s.ClosedAt = e.GetCloseTime().AsTime()
	}
	fields := e.GetSearchAttributes().GetIndexedFields()
	str := func(name string) string {
		var v string
		decode(fields[name], &v)
		return v
	}
	num := func(name string) int64 {
		var v int64
		decode(fields[name], &v)
		return v
	}
	s.Target = str(api.AttrTarget.GetName())
	s.Candidate = str(api.AttrCandidate.GetName())
	s.Stable = str(api.AttrStable.GetName())
	s.Phase = str(api.AttrPhase.GetName())
	s.Outcome = str(api.AttrOutcome.GetName())
	s.Step = num(api.AttrStep.GetName())
	s.Weight = num(api.AttrWeight.GetName())
	return s
}

func decode(p *commonpb.Payload, into any) {
	if p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, into)
	}
}
