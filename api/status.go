package api

// What a rollout and a wave show: the answers of their status queries,
// which `sluice status -o json`, the report and the Temporal UI read. They
// are views of the workflows' state, built by the workflows package; their
// JSON field names are kept, and durations read as Go writes them ("1m30s").

import (
	"encoding/json"
	"fmt"
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/capacity"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// Duration is a length of time whose JSON is its Go string ("1m30s"). It
// also reads a number of nanoseconds, as status answers of earlier releases
// wrote it.
type Duration time.Duration

// String is the duration as Go writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var ns int64
		if err := json.Unmarshal(b, &ns); err != nil {
			return fmt.Errorf("a duration must be a string such as \"1m30s\" or a number of nanoseconds, not %s", b)
		}
		*d = Duration(ns)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Phase is where a rollout stands.
type Phase string

const (
	PhaseResolving    Phase = "Resolving"
	PhaseWaitingReady Phase = "WaitingReady"
	PhaseStepping     Phase = "Stepping"
	PhaseGate         Phase = "AwaitingPromotion"
	PhaseHolding      Phase = "Holding"
	// PhaseWaitingWave: Ready, holding before the first step until its
	// wave is released (sluice.dev/waves).
	PhaseWaitingWave Phase = "WaitingForWave"
	// PhaseWaveHold: at 100%, waiting for the wave plan to end, so a later
	// wave's failure can still roll it back.
	PhaseWaveHold    Phase = "AwaitingWave"
	PhaseRollingBack Phase = "RollingBack"
	PhaseSucceeded   Phase = "Succeeded"
	PhaseRolledBack  Phase = "RolledBack"
	PhaseAborted     Phase = "Aborted"
	PhaseSuperseded  Phase = "Superseded"
	PhaseFailed      Phase = "Failed"
	// PhasePaused is reported while the rollout is paused; the phase it will
	// resume in stays in Status.Phase.
	PhasePaused Phase = "Paused"
)

// Done reports whether the phase is final.
func (p Phase) Done() bool {
	switch p {
	case PhaseSucceeded, PhaseRolledBack, PhaseAborted, PhaseSuperseded, PhaseFailed:
		return true
	}
	return false
}

// StepStatus is one step of the plan and how it went.
type StepStatus struct {
	Weight     int64    `json:"weight"`
	Hold       Duration `json:"hold"`
	Gate       bool     `json:"gate,omitempty"`
	GatePassed bool     `json:"gatePassed,omitempty"`
	// Skipped is set for a step the candidate's live share was already
	// past when the rollout started or rebased.
	Skipped   bool      `json:"skipped,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
}

// CommandRecord is one command as received: who, when, why, and whether it was applied.
type CommandRecord struct {
	Name     string    `json:"name"`
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
	Via      string    `json:"via"` // "update" or "signal"
	Rejected string    `json:"rejected,omitempty"`
}

// Status is a rollout as a person or a program reads it: the status query's
// answer (`sluice status -o json` prints it), and the source of the search
// attributes, the Temporal UI's details and the progress events, so all of
// them say the same. docs/operations.md describes every field.
type Status struct {
	Target        knative.TargetRef `json:"target"`
	Object        knative.ObjectRef `json:"object"`
	Configuration string            `json:"configuration,omitempty"`
	Policy        config.Policy     `json:"policy"`

	// Phase is where the rollout stands (while paused, where it will
	// resume); Shown is what to show a person: Paused while paused.
	Phase  Phase `json:"phase"`
	Shown  Phase `json:"shown"`
	Paused bool  `json:"paused"`
	// PauseReason says why it is paused and what resuming does; Drifted
	// says the pause is for traffic changed outside sluice.
	PauseReason string `json:"pauseReason,omitempty"`
	Drifted     bool   `json:"drifted,omitempty"`

	Candidate           string `json:"candidate"`
	CandidateGeneration int64  `json:"candidateGeneration,omitempty"`
	CandidateReady      bool   `json:"candidateReady"`
	// ReadinessFrom is what told the rollout its candidate was Ready: the
	// Revision's CloudEvent or the rollout's own watch.
	ReadinessFrom string `json:"readinessFrom,omitempty"`
	// Told is what the Revision's CloudEvent said, when one told it.
	Told             *CandidateSignal `json:"told,omitempty"`
	Stable           string           `json:"stable,omitempty"`
	PendingCandidate string           `json:"pendingCandidate,omitempty"`
	Superseded       []string         `json:"superseded,omitempty"`

	// Original is what a rollback restores; Baseline is Original with
	// latestRevision targets pinned to Stable, which every step is computed
	// from; Live is what sluice last wrote (or read before writing); Weight
	// the candidate's share of it.
	Original []servingv1.TrafficTarget `json:"original,omitempty"`
	Baseline []servingv1.TrafficTarget `json:"baseline,omitempty"`
	Live     []servingv1.TrafficTarget `json:"live,omitempty"`
	Weight   int64                     `json:"weight"`

	// StepNumber counts from 1: the step under way, or the last one
	// reached; zero before the first.
	StepNumber int          `json:"stepNumber"`
	StepCount  int          `json:"stepCount"`
	Steps      []StepStatus `json:"steps"`

	StartedAt     time.Time `json:"startedAt"`
	ReadyDeadline time.Time `json:"readyDeadline"`
	Deadline      time.Time `json:"deadline"`
	HoldUntil     time.Time `json:"holdUntil,omitzero"`
	// HoldLeftAt is the hold's time left as of AsOf (frozen while paused).
	HoldLeftAt Duration `json:"holdRemaining"`

	Analysis *AnalysisState  `json:"analysis,omitempty"`
	Capacity *CapacityStatus `json:"capacity,omitempty"`
	// Wave is the rollout's part in its wave plan, if the target has one.
	Wave     *WaveState      `json:"wave,omitempty"`
	Commands []CommandRecord `json:"commands,omitempty"`
	// Preview is the candidate's preview tag (sluice.dev/preview) while
	// the rollout keeps it.
	Preview *Preview `json:"preview,omitempty"`
	// Shortcut says why the rollout went to 100% in one write, skipping
	// the policy's steps and analysis: an undo, or a revert to a template
	// within the rollback window.
	Shortcut string `json:"shortcut,omitempty"`

	// Ending is the outcome a running rollback will end with; Outcome is
	// set once the rollout has ended, Reason says why.
	Ending  Outcome   `json:"ending,omitempty"`
	Outcome Outcome   `json:"outcome,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	EndedAt time.Time `json:"endedAt,omitzero"`
	Runs    int       `json:"runs"`
	AsOf    time.Time `json:"asOf"`

	// Filled in by the client that read the status, not by the workflow:
	// Serving is the traffic object's status.traffic as Knative reports it
	// (what the cluster serves, which may differ from what sluice wrote),
	// and Pending the activities Temporal is running or retrying.
	Serving []servingv1.TrafficTarget `json:"serving,omitempty"`
	Pending []PendingActivity         `json:"pending,omitempty"`
}

// CapacityStatus is a capacity rollout's plan and its pods as last read.
type CapacityStatus struct {
	// StablePods is the stable's pod count the stages were derived from.
	StablePods int32 `json:"stablePods"`
	// Stages holds, for each step, the pods the candidate and the stable
	// are bounded to and the candidate's share.
	Stages []capacity.Stage `json:"stages"`
	// CandidatePods and StablePodsNow are the Ready pods last read.
	CandidatePods int32 `json:"candidatePods"`
	StablePodsNow int32 `json:"stablePodsNow"`
}

// PendingActivity is an activity Temporal has scheduled and not finished:
// while it is retried, its attempt count and last error say why a rollout
// is not moving.
type PendingActivity struct {
	Activity  string `json:"activity"`
	Attempt   int32  `json:"attempt"`
	LastError string `json:"lastError,omitempty"`
}

// At recomputes what the status says about time at the reader's clock: the
// query runs on the workflow's time, which is that of its last task, so a
// hold's time left would otherwise stand still between tasks.
func (s *Status) At(now time.Time) {
	s.AsOf = now
	if s.Phase == PhaseHolding && !s.Paused && !s.HoldUntil.IsZero() {
		s.HoldLeftAt = Duration(max(s.HoldUntil.Sub(now), 0))
	}
}

// Where a rollout learnt its candidate's readiness (Status.ReadinessFrom).
const (
	ReadinessFromEvent = "event"
	ReadinessFromWatch = "watch"
)

// GateAfterHold reports whether the step after the one s stands at waits
// for a promotion that has not come.
func (s *Status) GateAfterHold() bool {
	n := s.StepNumber // the next step's index
	return n >= 0 && n < len(s.Steps) && s.Steps[n].Gate && !s.Steps[n].GatePassed
}

// ReadinessSource says in words who told the rollout its candidate's state,
// for the status and the UI; "" before anything did.
func (s *Status) ReadinessSource() string {
	switch s.ReadinessFrom {
	case ReadinessFromEvent:
		if s.Told != nil && s.Told.By != "" {
			return "told by its Revision's CloudEvent (from " + s.Told.By + ")"
		}
		return "told by its Revision's CloudEvent"
	case ReadinessFromWatch:
		return "seen by sluice's own read of the Revision"
	}
	return ""
}

// WaveMemberStatus is one cluster of a wave plan.
type WaveMemberStatus struct {
	Cluster    string    `json:"cluster"`
	Wave       int       `json:"wave"` // from 1
	WorkflowID string    `json:"workflowID,omitempty"`
	Candidate  string    `json:"candidate,omitempty"`
	JoinedAt   time.Time `json:"joinedAt,omitzero"`
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
	ReachedAt  time.Time `json:"reachedAt,omitzero"`
	EndedAt    time.Time `json:"endedAt,omitzero"`
	Outcome    string    `json:"outcome,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// Verdict is the last word the wave sent this cluster's rollout.
	Verdict string `json:"verdict,omitempty"`
}

// WaveStatus is the wave's status query answer.
type WaveStatus struct {
	WaveStart
	Phase string `json:"phase"`
	// Current is the wave (from 1) being waited for, rolled out or soaked.
	Current   int                `json:"current"`
	SoakUntil time.Time          `json:"soakUntil,omitzero"`
	Paused    bool               `json:"paused,omitempty"`
	Members   []WaveMemberStatus `json:"members"`
	Commands  []CommandRecord    `json:"commands,omitempty"`
	Outcome   string             `json:"outcome,omitempty"`
	Reason    string             `json:"reason,omitempty"`
}

// WaveState is a rollout's part in a wave plan: it joins its release's
// wave once its candidate is Ready, holds before the first step until the
// wave releases it, and at 100% waits for the plan to end.
type WaveState struct {
	ID      string `json:"id"`
	Release string `json:"release"`
	// Wave is this cluster's wave, from 1.
	Wave     int  `json:"wave"`
	Joined   bool `json:"joined,omitempty"`
	Released bool `json:"released,omitempty"`
	// Pending is a verdict received and not yet acted on; Verdict and
	// Reason the last one acted on.
	Pending       string `json:"pending,omitempty"`
	PendingReason string `json:"pendingReason,omitempty"`
	Verdict       string `json:"verdict,omitempty"`
	Reason        string `json:"reason,omitempty"`
	// Reached: at 100%, the wave was told; Told: the end was told.
	Reached bool `json:"reached,omitempty"`
	Told    bool `json:"told,omitempty"`
}

// AnalysisState is what a rollout has measured of its candidate and what the
// analysis has decided so far. It is part of the rollout's state, so the status query and
// continue-as-new carry it.
type AnalysisState struct {
	// Tallies are the checks, then the hold webhooks, in policy order, then
	// the rounds' score if the policy has comparison checks.
	Tallies []analysis.Tally `json:"tallies"`
	// Recent are the latest measurements, newest last (at most maxRecent);
	// every one is also an activity result in the history.
	Recent []analysis.Measurement `json:"recent,omitempty"`
	Rounds int                    `json:"rounds"`
	// NextAt is when the hold's next round is due.
	NextAt time.Time `json:"nextAt,omitzero"`
	// FinalStep is the step (from 1) whose closing round passed.
	FinalStep  int  `json:"finalStep,omitempty"`
	Started    bool `json:"started,omitempty"`
	GatePassed bool `json:"gatePassed,omitempty"`
	Ended      bool `json:"ended,omitempty"`
	// Calls numbers webhook calls, for their payload IDs.
	Calls int `json:"calls,omitempty"`
}

// Preview is where the candidate answers alone before its first share:
// its tag's URL, or any of the target's URLs with Header.
type Preview struct {
	Tag    string `json:"tag"`
	URL    string `json:"url,omitempty"`
	Header string `json:"header"`
}
