package api

import (
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// Member events, in the order a rollout sends them to its wave.
const (
	MemberJoined  = "joined"
	MemberReached = "reached" // at 100%, waiting for the wave
	MemberEnded   = "ended"
)

// Verdicts a wave sends its rollouts.
const (
	VerdictRelease  = "release"  // go on with the steps
	VerdictStop     = "stop"     // end at 0%: an earlier wave failed
	VerdictDone     = "done"     // end: no need to wait at 100%
	VerdictRollback = "rollback" // roll back: a wave failed and the plan says so
)

// WaveStart starts a wave workflow.
type WaveStart struct {
	// Target is the target without a cluster: the same in every cluster.
	Target  knative.TargetRef `json:"target"`
	Release string            `json:"release"`
	Plan    config.Waves      `json:"plan"`
}

// WaveMember is one rollout's news for its wave.
type WaveMember struct {
	Cluster    string `json:"cluster"`
	WorkflowID string `json:"workflowID"`
	Candidate  string `json:"candidate"`
	Event      string `json:"event"`
	Outcome    string `json:"outcome,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// WaveVerdict is a wave's word to one of its rollouts.
type WaveVerdict struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
}

// WaveResult is how a wave ended: Outcome is one of the wave phases
// WaveSucceeded, WaveFailed, WaveAborted.
type WaveResult struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// Wave phases: where a wave stands, and how it ended.
const (
	WaveWaiting   = "Waiting"           // for the wave's clusters to join (or a resume)
	WaveRolling   = "Rolling"           // the wave's rollouts run
	WaveSoaking   = "Soaking"           // they are at 100%; the next wave waits
	WaveGate      = "AwaitingPromotion" // soaked; the next wave waits for a person
	WaveSucceeded = "Succeeded"         // every cluster at 100%
	WaveFailed    = "Failed"
	WaveAborted   = "Aborted"
)
