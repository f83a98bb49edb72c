// Package workflows holds the Rollout workflow: one durable workflow per
// rollout target that walks a candidate Revision through its policy's traffic
// steps, and the messages (updates, signals, queries) that steer and read it.
//
// Everything here is deterministic: decisions are plain Go over the workflow's
// state, time comes from workflow.Now, and every side effect is an activity.
package workflows

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice/knative"
)

// WorkflowName is the registered name of the Rollout workflow.
const WorkflowName = "Rollout"

// Command names, used both as update names (the caller learns at once whether
// the command was accepted) and as signal names (fire and forget).
const (
	CommandPromote     = "promote"
	CommandPromoteFull = "promote-full"
	CommandPause       = "pause"
	CommandResume      = "resume"
	CommandAbort       = "abort"
)

// Other messages.
const (
	// SignalCandidate offers a Revision to the target's rollout, with its
	// readiness as its event showed it; sent with signal-with-start, it also
	// starts the rollout when none is running. The rollout decides: its own
	// candidate's state is acted on (or its own watch, whichever comes first),
	// a newer Revision supersedes the candidate, an older one is ignored.
	SignalCandidate = "candidate"
	// SignalTargetDeleted says the target may have been deleted; the
	// workflow re-reads it before ending the rollout.
	SignalTargetDeleted = "target-deleted"
	// QueryStatus returns the rollout's full Status.
	QueryStatus = "status"
)

// WorkflowID is the one workflow ID per target: at most one rollout of a
// target runs at a time.
func WorkflowID(t knative.TargetRef) string {
	id := "rollout/"
	if t.Cluster != "" {
		// Clusters sharing a Temporal namespace each have their own rollouts.
		id += t.Cluster + "/"
	}
	return id + t.Namespace + "/" + strings.ToLower(t.Kind) + "/" + t.Name
}

// Input starts a rollout of Candidate on Target. Carry is set only when the
// workflow continues as new: it holds the state to resume from.
type Input struct {
	Target    knative.TargetRef `json:"target"`
	Candidate string            `json:"candidate"`
	// RequestedBy names who or what asked for the rollout (a user, an event source).
	RequestedBy string `json:"requestedBy,omitempty"`
	Carry       *state `json:"carry,omitempty"`
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
	// State is Ready, Failed or Deleted as the Revision's event showed it;
	// empty while it is not Ready yet, or when a person offers it.
	State string `json:"state,omitempty"`
	// Reason and Message are the Ready condition's, when it failed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// By names who offered it: a person, or the event source.
	By string `json:"by,omitempty"`
}

// Readiness states a CandidateSignal carries.
const (
	StateReady   = "Ready"
	StateFailed  = "Failed"
	StateDeleted = "Deleted"
)

func (c CandidateSignal) revisionState() knative.RevisionState {
	return knative.RevisionState{
		Found: c.State != StateDeleted, Ready: c.State == StateReady, Failed: c.State == StateFailed,
		Reason: c.Reason, Message: c.Message,
	}
}

// Where a rollout learnt its candidate's readiness (Status.ReadinessFrom).
const (
	ReadinessFromEvent = "event"
	ReadinessFromWatch = "watch"
)

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

// Result is the workflow's result: the outcome, why, and what was live at the end.
type Result struct {
	Outcome   Outcome   `json:"outcome"`
	Reason    string    `json:"reason,omitempty"`
	Candidate string    `json:"candidate"`
	Stable    string    `json:"stable,omitempty"`
	EndedAt   time.Time `json:"endedAt"`
}
