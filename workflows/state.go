package workflows

import (
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/config"
)

// Phase is where a rollout stands.
type Phase string

const (
	PhaseResolving    Phase = "Resolving"
	PhaseWaitingReady Phase = "WaitingReady"
	PhaseStepping     Phase = "Stepping"
	PhaseGate         Phase = "AwaitingPromotion"
	PhaseHolding      Phase = "Holding"
	PhaseRollingBack  Phase = "RollingBack"
	PhaseSucceeded    Phase = "Succeeded"
	PhaseRolledBack   Phase = "RolledBack"
	PhaseAborted      Phase = "Aborted"
	PhaseSuperseded   Phase = "Superseded"
	PhaseFailed       Phase = "Failed"
	// PhasePaused is reported while the rollout is paused; the phase it will
	// resume in stays in State.Phase.
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

// State is everything a rollout knows. It is the status query's answer and is
// carried whole through continue-as-new, so it must hold every decision the
// workflow has made.
type State struct {
	Target        activities.TargetRef `json:"target"`
	Object        activities.ObjectRef `json:"object"`
	Configuration string               `json:"configuration,omitempty"`
	Policy        config.Policy        `json:"policy"`
	Phase         Phase                `json:"phase"`

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

	Step  int          `json:"step"`
	Steps []StepStatus `json:"steps"`

	StartedAt     time.Time     `json:"startedAt"`
	ReadyDeadline time.Time     `json:"readyDeadline"`
	Deadline      time.Time     `json:"deadline"`
	HoldUntil     time.Time     `json:"holdUntil,omitzero"`
	HoldLeft      time.Duration `json:"holdLeft,omitempty"` // frozen while paused

	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
	// Drifted is set while paused because traffic was changed outside sluice.
	Drifted bool `json:"drifted,omitempty"`
	// Rebase makes the next step start from the live traffic: set when an
	// operator resumes after drift.
	Rebase bool `json:"rebase,omitempty"`

	PromoteRequested bool     `json:"promoteRequested,omitempty"`
	PromoteFull      bool     `json:"promoteFull,omitempty"`
	Abort            *Command `json:"abort,omitempty"`
	// PendingCandidate is a newer Revision waiting to supersede Candidate.
	PendingCandidate string `json:"pendingCandidate,omitempty"`
	// Told is the candidate's readiness as its Revision event told it, if
	// one did; ReadinessFrom says what the rollout acted on: the event or
	// its own watch of the Revision, whichever came first.
	Told          *CandidateSignal `json:"told,omitempty"`
	ReadinessFrom string           `json:"readinessFrom,omitempty"`
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

	Commands   []CommandRecord `json:"commands,omitempty"`
	Superseded []string        `json:"superseded,omitempty"`

	// Ending is the outcome a running rollback will end with; Outcome is
	// set only once the rollout has ended.
	Ending  Outcome   `json:"ending,omitempty"`
	Outcome Outcome   `json:"outcome,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	EndedAt time.Time `json:"endedAt,omitzero"`

	// Runs counts the runs this rollout took through continue-as-new.
	Runs int `json:"runs"`
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

// Status is the answer to the status query: the state plus figures derived at
// the time of asking.
type Status struct {
	State
	// Shown is the phase to show a person: Paused while paused.
	Shown Phase `json:"shown"`
	// StepNumber counts from 1; zero before the first step.
	StepNumber int           `json:"stepNumber"`
	StepCount  int           `json:"stepCount"`
	HoldLeftAt time.Duration `json:"holdRemaining"`
	AsOf       time.Time     `json:"asOf"`

	// Filled in by the client that read the status, not by the workflow:
	// Serving is the traffic object's status.traffic as Knative reports it
	// (what the cluster serves, which may differ from what sluice wrote),
	// and Pending the activities Temporal is running or retrying.
	Serving []servingv1.TrafficTarget `json:"serving,omitempty"`
	Pending []PendingActivity         `json:"pending,omitempty"`
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
		s.HoldLeftAt = max(s.HoldUntil.Sub(now), 0)
	}
}
