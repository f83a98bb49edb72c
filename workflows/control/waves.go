package control

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// maxWaves bounds how many wave workflows WaveID looks through.
const maxWaves = 1000

// WaveID finds the wave of target's release (the newest when release is
// empty). A wave is shared by every cluster, so the target's cluster does
// not matter.
func (c *Client) WaveID(ctx context.Context, target knative.TargetRef, release string) (string, error) {
	shared := knative.TargetRef{Namespace: target.Namespace, Kind: target.Kind, Name: target.Name}
	if release != "" {
		return api.WaveID(shared, release), nil
	}
	prefix := api.WaveID(shared, "")
	type found struct {
		id      string
		started int64
	}
	var waves []found
	var token []byte
	for len(waves) < maxWaves {
		resp, err := c.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + api.WaveWorkflow + "'", PageSize: 1000, NextPageToken: token,
		})
		if err != nil {
			return "", fmt.Errorf("list waves: %w", err)
		}
		for _, e := range resp.Executions {
			if id := e.GetExecution().GetWorkflowId(); strings.HasPrefix(id, prefix) {
				waves = append(waves, found{id, e.GetStartTime().AsTime().UnixNano()})
			}
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	if len(waves) == 0 {
		return "", fmt.Errorf("%w: no wave of %s (its targets have a sluice.dev/waves plan?)", ErrNoRollout, shared)
	}
	sort.Slice(waves, func(i, j int) bool { return waves[i].started > waves[j].started })
	return waves[0].id, nil
}

// WaveStatus reads a wave's status query.
func (c *Client) WaveStatus(ctx context.Context, id string) (api.WaveStatus, error) {
	var st api.WaveStatus
	v, err := c.Temporal.QueryWorkflow(ctx, id, "", api.QueryStatus)
	if err != nil {
		return st, fmt.Errorf("status of wave %s: %w", id, err)
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decode the status of wave %s: %w", id, err)
	}
	return st, nil
}

// WaveCommand sends a wave a command (promote, pause, resume, abort) as a
// signal, recorded with who sent it and why.
func (c *Client) WaveCommand(ctx context.Context, id, command, reason string) error {
	if err := c.Temporal.SignalWorkflow(ctx, id, "", command, api.Command{By: c.Identity, Reason: reason}); err != nil {
		return fmt.Errorf("%s wave %s: %w", command, id, err)
	}
	return nil
}
