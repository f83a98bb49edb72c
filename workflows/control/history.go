package control

import (
	"context"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/measure"
)

// Round is one batch of measurements a rollout scheduled together: a round
// of checks and hold webhooks, or the webhooks of one moment.
type Round struct {
	At           time.Time              `json:"at"`
	Measurements []analysis.Measurement `json:"measurements"`
}

// maxRuns bounds how far Rounds follows continue-as-new back.
const maxRuns = 100

// Rounds reads every measurement of the rollout of candidate from the
// workflow's history — all of them, where the status keeps the latest 40 —
// following continue-as-new back through the runs. Runs that rolled out
// another candidate (before a supersede) are left out. A measurement whose
// activity failed for good counts as the workflow counted it: an error.
func (c *Client) Rounds(ctx context.Context, target knative.TargetRef, candidate string) ([]Round, error) {
	target = target.In(c.Cluster)
	var all []Round
	runID := ""
	for range maxRuns {
		rounds, previous, err := c.runRounds(ctx, target, runID, candidate)
		if err != nil {
			return nil, err
		}
		all = append(rounds, all...)
		if previous == "" {
			break
		}
		runID = previous
	}
	return all, nil
}

// scheduled is a measuring activity as the history scheduled it.
type scheduled struct {
	round, index int
	lost         analysis.Measurement
}

// runRounds reads one run's rounds, and the run it continued, if any.
func (c *Client) runRounds(ctx context.Context, target knative.TargetRef, runID, candidate string) ([]Round, string, error) {
	id := api.RolloutID(target)
	it := c.Temporal.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	dc := converter.GetDefaultDataConverter()
	var (
		rounds   []Round
		previous string
	)
	byTask := map[int64]int{} // the workflow task that scheduled a round → its index
	acts := map[int64]scheduled{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, "", c.explain(err, target)
		}
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			previous = a.GetContinuedExecutionRunId()
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			lost, ok, err := measuring(dc, a, candidate)
			if err != nil {
				return nil, "", fmt.Errorf("history of %s, event %d: %w", id, ev.GetEventId(), err)
			}
			if !ok {
				continue
			}
			i, seen := byTask[a.GetWorkflowTaskCompletedEventId()]
			if !seen {
				i = len(rounds)
				byTask[a.GetWorkflowTaskCompletedEventId()] = i
				rounds = append(rounds, Round{At: ev.GetEventTime().AsTime()})
			}
			// A place in the round in the order scheduled (the policy's),
			// not the order the activities finish in.
			acts[ev.GetEventId()] = scheduled{round: i, index: len(rounds[i].Measurements), lost: lost}
			rounds[i].Measurements = append(rounds[i].Measurements, analysis.Measurement{})
			continue
		}
		m, scheduledID, ok, err := outcome(dc, ev, acts)
		if err != nil {
			return nil, "", fmt.Errorf("history of %s, event %d: %w", id, ev.GetEventId(), err)
		}
		if ok {
			s := acts[scheduledID]
			rounds[s.round].Measurements[s.index] = m
		}
	}
	// Activities still running have no measurement yet.
	for i := range rounds {
		rounds[i].Measurements = slices.DeleteFunc(rounds[i].Measurements, func(m analysis.Measurement) bool { return m.Name == "" })
	}
	return rounds, previous, nil
}

// measuring reports whether a scheduled activity measures candidate, and
// the measurement it counts as if it fails for good.
func measuring(dc converter.DataConverter, a *historypb.ActivityTaskScheduledEventAttributes, candidate string) (analysis.Measurement, bool, error) {
	switch a.GetActivityType().GetName() {
	case api.ActivityMeasureCheck:
		var in measure.CheckInput
		if err := dc.FromPayloads(a.GetInput(), &in); err != nil {
			return analysis.Measurement{}, false, err
		}
		kind := analysis.KindCheck
		if in.Check.Compare != nil {
			kind = analysis.KindCompare
		}
		return analysis.Measurement{Name: in.Check.Name, Kind: kind, Result: analysis.Error, Step: in.Step, Weight: in.Vars.Weight, DryRun: in.Check.DryRun},
			in.Vars.Candidate == candidate, nil
	case api.ActivityCallWebhook:
		var in measure.WebhookInput
		if err := dc.FromPayloads(a.GetInput(), &in); err != nil {
			return analysis.Measurement{}, false, err
		}
		r := in.Payload.Rollout
		return analysis.Measurement{Name: in.Hook.Name, Kind: analysis.KindWebhook, Moment: string(in.Hook.At), Result: analysis.Failed, Step: r.Step, Weight: r.Weight},
			r.Candidate == candidate, nil
	}
	return analysis.Measurement{}, false, nil
}

// outcome reads a measuring activity's result, or the measurement it
// counts as when it failed or timed out for good.
func outcome(dc converter.DataConverter, ev *historypb.HistoryEvent, acts map[int64]scheduled) (analysis.Measurement, int64, bool, error) {
	var (
		id  int64
		msg string
	)
	switch {
	case ev.GetActivityTaskCompletedEventAttributes() != nil:
		a := ev.GetActivityTaskCompletedEventAttributes()
		if _, ok := acts[a.GetScheduledEventId()]; !ok {
			return analysis.Measurement{}, 0, false, nil
		}
		var m analysis.Measurement
		if err := dc.FromPayloads(a.GetResult(), &m); err != nil {
			return m, 0, false, err
		}
		return m, a.GetScheduledEventId(), true, nil
	case ev.GetActivityTaskFailedEventAttributes() != nil:
		a := ev.GetActivityTaskFailedEventAttributes()
		id, msg = a.GetScheduledEventId(), a.GetFailure().GetMessage()
	case ev.GetActivityTaskTimedOutEventAttributes() != nil:
		a := ev.GetActivityTaskTimedOutEventAttributes()
		id, msg = a.GetScheduledEventId(), "timed out: "+a.GetFailure().GetMessage()
	default:
		return analysis.Measurement{}, 0, false, nil
	}
	s, ok := acts[id]
	if !ok {
		return analysis.Measurement{}, 0, false, nil
	}
	m := s.lost
	m.Message, m.At = msg, ev.GetEventTime().AsTime()
	return m, id, true, nil
}
