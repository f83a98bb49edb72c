package workflows

import (
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/capacity"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

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

// state is everything a rollout knows: every decision it has made, carried
// whole through continue-as-new. It is private; what a reader sees is
// Status, built from it by view.
type state struct {
	// Wave is this rollout's part in a wave plan; nil without one.
	Wave          *WaveState        `json:"wave,omitempty"`
	Target        knative.TargetRef `json:"target"`
	Object        knative.ObjectRef `json:"object"`
	Configuration string            `json:"configuration,omitempty"`
	// Policy is the target's policy as resolved; its Steps are the plan.
	Policy config.Policy `json:"policy"`
	Phase  Phase         `json:"phase"`

	Candidate           string `json:"candidate"`
	CandidateGeneration int64  `json:"candidateGeneration,omitempty"`
	CandidateReady      bool   `json:"candidateReady"`
	Stable              string `json:"stable,omitempty"`

	// Original is the list a rollback restores: the exact traffic list
	// before sluice's first write or, once an operator resumed a rollout
	// whose traffic someone changed, the list they left with the
	// candidate's share back on the stable Revision.
	Original []servingv1.TrafficTarget `json:"original,omitempty"`
	// Baseline is Original with latestRevision targets pinned to Stable: the
	// list every step is computed from.
	Baseline []servingv1.TrafficTarget `json:"baseline,omitempty"`
	// Live is what sluice last wrote, or read before writing: what it expects
	// to find on the object next time.
	Live []servingv1.TrafficTarget `json:"live,omitempty"`
	// Weight is the candidate's current share of the stable traffic, in percent.
	Weight int64 `json:"weight"`

	// Step indexes Policy.Steps; Runs says how each step went.
	Step     int       `json:"step"`
	StepRuns []stepRun `json:"stepRuns"`

	StartedAt     time.Time `json:"startedAt"`
	ReadyDeadline time.Time `json:"readyDeadline"`
	Deadline      time.Time `json:"deadline"`
	HoldUntil     time.Time `json:"holdUntil,omitzero"`

	// Pause is set while the rollout waits for a person.
	Pause *pause `json:"pause,omitempty"`
	// Rebase makes the next step start from the live traffic: set when an
	// operator resumes after drift.
	Rebase bool `json:"rebase,omitempty"`

	PromoteRequested bool         `json:"promoteRequested,omitempty"`
	PromoteFull      bool         `json:"promoteFull,omitempty"`
	Abort            *api.Command `json:"abort,omitempty"`
	// PendingCandidate is a newer Revision waiting to supersede Candidate.
	PendingCandidate string `json:"pendingCandidate,omitempty"`
	// Told is the candidate's readiness as its Revision event told it, if
	// one did; ReadinessFrom says what the rollout acted on: the event or
	// its own watch of the Revision, whichever came first.
	Told          *api.CandidateSignal `json:"told,omitempty"`
	ReadinessFrom string               `json:"readinessFrom,omitempty"`
	// DeleteHints counts delete hints, DeleteChecked those already checked.
	DeleteHints   int `json:"deleteHints,omitempty"`
	DeleteChecked int `json:"deleteChecked,omitempty"`

	// RolloutID identifies this rollout of this candidate in progress event
	// IDs; Seq numbers its events.
	RolloutID     string `json:"rolloutId,omitempty"`
	Seq           int    `json:"seq,omitempty"`
	EventsEnabled bool   `json:"eventsEnabled,omitempty"`

	// Analysis is set when the policy has checks or webhooks.
	Analysis *AnalysisState `json:"analysis,omitempty"`
	// Capacity is set when the policy stages pods.
	Capacity *capacityState `json:"capacity,omitempty"`

	Commands   []CommandRecord `json:"commands,omitempty"`
	Superseded []string        `json:"superseded,omitempty"`

	// Ending is the outcome a running rollback will end with; api.Outcome is
	// set only once the rollout has ended.
	Ending  api.Outcome `json:"ending,omitempty"`
	Outcome api.Outcome `json:"outcome,omitempty"`
	Reason  string      `json:"reason,omitempty"`
	EndedAt time.Time   `json:"endedAt,omitzero"`

	// Runs counts the runs this rollout took through continue-as-new.
	Runs int `json:"runs"`
}

// stepRun is what happened at one step of the plan.
type stepRun struct {
	GatePassed bool `json:"gatePassed,omitempty"`
	// Skipped is set for a step the candidate's live share was already
	// past when the rollout started or rebased.
	Skipped   bool      `json:"skipped,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
}

// pauseCause is what paused a rollout, which decides what resuming does.
type pauseCause string

const (
	pausedByCommand  pauseCause = "command"
	pausedByDrift    pauseCause = "drift"    // resuming rebases on the live traffic
	pausedByAnalysis pauseCause = "analysis" // resuming forgives the failed checks
	// pausedByFinalRound: a step's closing round paused; resuming also
	// lets the step end.
	pausedByFinalRound pauseCause = "analysis-final"
	// pausedByError: a write the API server refused, or a read that failed
	// where the rollout cannot go on without it.
	pausedByError pauseCause = "error"
)

// pause is why a rollout waits for a person, and what resuming restores.
type pause struct {
	Cause  pauseCause `json:"cause"`
	Reason string     `json:"reason"`
	// HoldLeft is the hold's time left when it paused: a hold does not
	// run while paused.
	HoldLeft time.Duration `json:"holdLeft,omitempty"`
}

// paused reports whether the rollout waits for a person.
func (s *state) paused() bool { return s.Pause != nil }

// pauseFor pauses the rollout, freezing the time its hold has left.
func (s *state) pauseFor(cause pauseCause, reason string, now time.Time) {
	p := &pause{Cause: cause, Reason: reason}
	if s.Phase == PhaseHolding {
		p.HoldLeft = max(s.HoldUntil.Sub(now), 0)
	}
	s.Pause = p
}

// stepPlan is step i of the plan with how it went.
func (s *state) stepPlan(i int) StepStatus {
	p := s.Policy.Steps[i]
	v := StepStatus{Weight: p.Weight, Hold: p.Hold, Gate: p.Gate}
	if i < len(s.StepRuns) {
		run := s.StepRuns[i]
		v.GatePassed, v.Skipped, v.StartedAt, v.EndedAt = run.GatePassed, run.Skipped, run.StartedAt, run.EndedAt
	}
	return v
}

// StepStatus is one step of the plan and how it went.
type StepStatus struct {
	Weight     int64         `json:"weight"`
	Hold       time.Duration `json:"hold"`
	Gate       bool          `json:"gate,omitempty"`
	GatePassed bool          `json:"gatePassed,omitempty"`
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
	Told             *api.CandidateSignal `json:"told,omitempty"`
	Stable           string               `json:"stable,omitempty"`
	PendingCandidate string               `json:"pendingCandidate,omitempty"`
	Superseded       []string             `json:"superseded,omitempty"`

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
	HoldLeftAt time.Duration `json:"holdRemaining"`

	Analysis *AnalysisState  `json:"analysis,omitempty"`
	Capacity *CapacityStatus `json:"capacity,omitempty"`
	// Wave is the rollout's part in its wave plan, if the target has one.
	Wave     *WaveState      `json:"wave,omitempty"`
	Commands []CommandRecord `json:"commands,omitempty"`

	// Ending is the outcome a running rollback will end with; api.Outcome is
	// set once the rollout has ended, Reason says why.
	Ending  api.Outcome `json:"ending,omitempty"`
	Outcome api.Outcome `json:"outcome,omitempty"`
	Reason  string      `json:"reason,omitempty"`
	EndedAt time.Time   `json:"endedAt,omitzero"`
	Runs    int         `json:"runs"`
	AsOf    time.Time   `json:"asOf"`

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

// view builds the Status of a rollout as of now: the one place that
// decides what the rollout shows.
func view(st *state, now time.Time) Status {
	v := Status{
		Target: st.Target, Object: st.Object, Configuration: st.Configuration, Policy: st.Policy,
		Phase: st.Phase, Shown: st.Phase, Paused: st.paused(),
		Candidate: st.Candidate, CandidateGeneration: st.CandidateGeneration, CandidateReady: st.CandidateReady,
		ReadinessFrom: st.ReadinessFrom, Told: st.Told, Stable: st.Stable, PendingCandidate: st.PendingCandidate, Superseded: st.Superseded,
		Original: st.Original, Baseline: st.Baseline, Live: st.Live, Weight: st.Weight,
		StepCount: len(st.Policy.Steps),
		StartedAt: st.StartedAt, ReadyDeadline: st.ReadyDeadline, Deadline: st.Deadline, HoldUntil: st.HoldUntil,
		Analysis: st.Analysis, Commands: st.Commands, Wave: st.Wave,
		Ending: st.Ending, Outcome: st.Outcome, Reason: st.Reason, EndedAt: st.EndedAt, Runs: st.Runs,
	}
	if p := st.Pause; p != nil {
		v.Shown, v.PauseReason, v.Drifted = PhasePaused, p.Reason, p.Cause == pausedByDrift
	}
	started := st.Step < len(st.StepRuns) && !st.StepRuns[st.Step].StartedAt.IsZero()
	switch {
	case st.Phase == PhaseHolding, st.Phase == PhaseGate, st.Phase == PhaseStepping, st.Weight > 0, started:
		v.StepNumber = st.Step + 1
	}
	if c := st.Capacity; c != nil && len(c.Stages) > 0 {
		v.Capacity = &CapacityStatus{StablePods: c.StablePods, Stages: c.Stages, CandidatePods: c.CandidatePods, StablePodsNow: c.StablePodsNow}
	}
	v.Steps = make([]StepStatus, len(st.Policy.Steps))
	for i := range v.Steps {
		v.Steps[i] = st.stepPlan(i)
	}
	if st.Pause != nil && st.Phase == PhaseHolding {
		v.HoldLeftAt = st.Pause.HoldLeft
	}
	v.At(now)
	return v
}

// At recomputes what the status says about time at the reader's clock: the
// query runs on the workflow's time, which is that of its last task, so a
// hold's time left would otherwise stand still between tasks.
func (s *Status) At(now time.Time) {
	s.AsOf = now
	if s.Phase == PhaseHolding && !s.Paused && !s.HoldUntil.IsZero() {
		s.HoldLeftAt = max(s.HoldUntil.Sub(now), 0)
	}
}
