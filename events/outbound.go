package events

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluicehq/sluice/analysis"
)

// Progress event types sluice emits, one per rollout transition.
const (
	ProgressPrefix     = "dev.sluice.rollout."
	ProgressStarted    = ProgressPrefix + "started"
	ProgressStep       = ProgressPrefix + "step"
	ProgressPaused     = ProgressPrefix + "paused"
	ProgressResumed    = ProgressPrefix + "resumed"
	ProgressPromoted   = ProgressPrefix + "promoted"
	ProgressSucceeded  = ProgressPrefix + "succeeded"
	ProgressAborted    = ProgressPrefix + "aborted"
	ProgressRolledBack = ProgressPrefix + "rolledback"
	ProgressFailed     = ProgressPrefix + "failed"
	ProgressSuperseded = ProgressPrefix + "superseded"
	// ProgressAnalysis carries one round of analysis measurements.
	ProgressAnalysis = ProgressPrefix + "analysis"

	// A wave plan's events (docs/waves.md): a wave released, and how the
	// plan ended. Their data's wave says which.
	WavePrefix    = "dev.sluice.wave."
	WaveReleased  = WavePrefix + "released"
	WaveSucceeded = WavePrefix + "succeeded"
	WaveFailed    = WavePrefix + "failed"
	WaveAborted   = WavePrefix + "aborted"
)

// Progress is one progress event as the workflow decides it. Its ID is
// fixed by the workflow, so a retried send repeats the same event rather
// than emitting a second one.
type Progress struct {
	ID   string       `json:"id"`
	Type string       `json:"type"`
	Time time.Time    `json:"time"`
	Data ProgressData `json:"data"`
}

// ProgressData is the data of every progress event.
type ProgressData struct {
	Namespace  string `json:"namespace"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	WorkflowID string `json:"workflowId"`
	Candidate  string `json:"candidate"`
	Stable     string `json:"stable,omitempty"`
	Phase      string `json:"phase"`
	Step       int    `json:"step"`
	StepCount  int    `json:"stepCount"`
	// Weight is the candidate's share of the stable Revision's traffic, in percent.
	Weight  int64  `json:"weight"`
	Traffic string `json:"traffic,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// HoldUntil is when the step's hold ends, on step events of a step
	// that holds.
	HoldUntil *time.Time `json:"holdUntil,omitempty"`
	// GateAfterHold is set, with HoldUntil, when the hold ends at a gate:
	// the rollout then awaits promotion, and no event says so until then.
	GateAfterHold bool `json:"gateAfterHold,omitempty"`
	// By is who caused the transition: the sender of a command, or "sluice".
	By       string `json:"by,omitempty"`
	Sequence int    `json:"sequence"`
	// Measurements are set on analysis events.
	Measurements []analysis.Measurement `json:"measurements,omitempty"`
	// Pods is set in capacity mode (docs/capacity.md).
	Pods *ProgressPods `json:"pods,omitempty"`
	// Wave is set on a wave plan's events.
	Wave *ProgressWave `json:"wave,omitempty"`
}

// ProgressWave is where a wave plan stands: its release, the wave (from 1)
// the event is about, of how many, and that wave's clusters.
type ProgressWave struct {
	Release  string   `json:"release"`
	Wave     int      `json:"wave"`
	Waves    int      `json:"waves"`
	Clusters []string `json:"clusters"`
}

// ProgressPods is what a capacity rollout knows of its pods: each
// Revision's Ready pods as last read and the stable's count the stages were
// derived from.
type ProgressPods struct {
	Candidate  int32 `json:"candidate"`
	Stable     int32 `json:"stable"`
	StableFrom int32 `json:"stableFrom"`
}

// Source is the CloudEvents source of a rollout's progress events.
func Source(namespace, kind, name string) string {
	return "/sluice/rollouts/" + namespace + "/" + strings.ToLower(kind) + "/" + name
}

// Sender delivers progress events to a sink, the Knative SinkBinding way:
// the sink URL from K_SINK and extra attributes from K_CE_OVERRIDES.
type Sender struct {
	client    cloudevents.Client
	sink      string
	overrides map[string]string
}

// NewSender builds a Sender for sink. overridesJSON is K_CE_OVERRIDES, e.g.
// {"extensions":{"cluster":"prod"}}; empty means none.
func NewSender(sink, overridesJSON string, hc *http.Client) (*Sender, error) {
	if sink == "" {
		return nil, nil
	}
	var overrides struct {
		Extensions map[string]string `json:"extensions"`
	}
	if overridesJSON != "" {
		if err := json.Unmarshal([]byte(overridesJSON), &overrides); err != nil {
			return nil, fmt.Errorf("K_CE_OVERRIDES is not valid JSON like {\"extensions\":{\"key\":\"value\"}}: %w", err)
		}
	}
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	p, err := cehttp.New(cehttp.WithTarget(sink), cehttp.WithClient(*hc))
	if err != nil {
		return nil, fmt.Errorf("progress event sink %q: %w", sink, err)
	}
	c, err := cloudevents.NewClient(p, cloudevents.WithTimeNow())
	if err != nil {
		return nil, fmt.Errorf("progress event client: %w", err)
	}
	return &Sender{client: c, sink: sink, overrides: overrides.Extensions}, nil
}

// Event builds the CloudEvent for a progress event.
func (s *Sender) Event(p Progress) (cloudevents.Event, error) {
	e := cloudevents.NewEvent()
	e.SetID(p.ID)
	e.SetType(p.Type)
	e.SetSource(Source(p.Data.Namespace, p.Data.Kind, p.Data.Name))
	e.SetSubject(p.Data.Candidate)
	if w := p.Data.Wave; w != nil {
		e.SetSource("/sluice/waves/" + p.Data.Namespace + "/" + strings.ToLower(p.Data.Kind) + "/" + p.Data.Name)
		e.SetSubject(w.Release)
	}
	e.SetTime(p.Time)
	e.SetExtension("sequence", p.Data.Sequence)
	for k, v := range s.overrides {
		e.SetExtension(k, v)
	}
	if err := e.SetData(cloudevents.ApplicationJSON, p.Data); err != nil {
		return e, fmt.Errorf("encode progress event: %w", err)
	}
	return e, e.Validate()
}

// Send delivers one progress event and reports a failure unless the sink
// acknowledged it with a 2xx.
func (s *Sender) Send(ctx context.Context, p Progress) error {
	e, err := s.Event(p)
	if err != nil {
		return err
	}
	if res := s.client.Send(ctx, e); !cloudevents.IsACK(res) {
		return fmt.Errorf("send %s to %s: %w", p.Type, s.sink, res)
	}
	return nil
}
