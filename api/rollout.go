package api

import (
	"time"

	"github.com/sluicehq/sluice/knative"
)

// Input starts a rollout of Candidate on Target. When a rollout continues
// as new, the workflow adds the state it resumes from under "carry", which
// only the workflow reads.
type Input struct {
	Target    knative.TargetRef `json:"target"`
	Candidate string            `json:"candidate"`
	// RequestedBy names who or what asked for the rollout (a user, an event source).
	RequestedBy string `json:"requestedBy,omitempty"`
	// Undo, if set, makes the run an undo: Candidate (or, if empty, the
	// last Revision that had 100% of the traffic) gets 100% in one write,
	// with no steps and no analysis.
	Undo *Undo `json:"undo,omitempty"`
}

// Undo is why an undo was asked for; RequestedBy says who asked.
type Undo struct {
	Reason string `json:"reason"`
}

// Command is the payload of every steering command: who sent it and why.
type Command struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// CandidateSignal offers a Revision as the rollout's candidate.
type CandidateSignal struct {
	Revision string `json:"revision"`
	// Generation is the Configuration generation the Revision runs (its
	// configurationGeneration label), 0 if the sender does not know it.
	Generation int64 `json:"generation,omitempty"`
	// State is the Revision's readiness as its event showed it: pending
	// (empty) also when a person offers it.
	State knative.Readiness `json:"state,omitempty"`
	// Reason and Message are the Ready condition's, when it failed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// By names who offered it: a person, or the event source.
	By string `json:"by,omitempty"`
}

// RevisionState is what the signal says of its Revision, in the form the
// rollout's own reads of a Revision take.
func (c CandidateSignal) RevisionState() knative.RevisionState {
	return knative.RevisionState{
		Found: c.State != knative.RevisionDeleted, Ready: c.State == knative.RevisionReady, Failed: c.State == knative.RevisionFailed,
		Reason: c.Reason, Message: c.Message,
	}
}

// ObjectHint names the object a delete hint is about.
type ObjectHint struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// Outcome is how a rollout of one candidate ended.
type Outcome string

const (
	OutcomeSucceeded  Outcome = "Succeeded"
	OutcomeRolledBack Outcome = "RolledBack"
	OutcomeAborted    Outcome = "Aborted"
	OutcomeSuperseded Outcome = "Superseded"
	OutcomeFailed     Outcome = "Failed"
)

// Result is a rollout's result: the outcome, why, and what was live at the end.
type Result struct {
	Outcome   Outcome   `json:"outcome"`
	Reason    string    `json:"reason,omitempty"`
	Candidate string    `json:"candidate"`
	Stable    string    `json:"stable,omitempty"`
	EndedAt   time.Time `json:"endedAt"`
}
