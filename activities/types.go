// Package activities adapts sluice's side effects to Temporal: each activity
// calls the knative or analysis package, sorts its errors into the
// retryable and the non-retryable (typed, for the workflow to branch on),
// and bounds its watches by its own deadline. Every activity is idempotent,
// so Temporal may retry it after a crash at any point.
package activities

import (
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// Error types carried by non-retryable activity errors; the workflow branches on them.
const (
	ErrTargetNotFound = "TargetNotFound"
	ErrNotOptedIn     = "NotOptedIn"
	ErrInvalidPolicy  = "InvalidPolicy"
	// ErrWrongCluster: the rollout names a cluster this worker does not serve.
	ErrWrongCluster   = "WrongCluster"
	ErrInvalidTraffic = "InvalidTraffic"
	// ErrRevisionNotReady: the list names a Revision that is not Ready now;
	// the error's details name it.
	ErrRevisionNotReady = "RevisionNotReady"
	ErrDrift            = "TrafficDrift"
	ErrScaleDrift       = "ScaleDrift"
	ErrNotVisible       = "TrafficNotVisible"
	// ErrWorkerStopping: a wait was cut short by its worker stopping; it is
	// retried on another worker.
	ErrWorkerStopping = "WorkerStopping"
	// ErrWriteRefused: the API server refused a traffic write for a reason
	// outside the traffic list (the object's template, a cluster limit,
	// RBAC). Rolling back would be refused too; the operator must fix it.
	ErrWriteRefused = "WriteRefused"
)

// ResolveInput asks for a target's policy and traffic ahead of a rollout of Candidate.
type ResolveInput struct {
	Target    knative.TargetRef `json:"target"`
	Candidate string            `json:"candidate"`
	// Undo resolves an undo: Candidate is the Revision to go back to, or,
	// if empty, the last one that had 100% (config.AnnotationStableHistory).
	Undo bool `json:"undo,omitempty"`
}

// Resolved is what a rollout needs to know about its target before it starts.
type Resolved struct {
	Object        knative.ObjectRef         `json:"object"`
	Configuration string                    `json:"configuration"`
	Policy        config.Policy             `json:"policy"`
	Traffic       []servingv1.TrafficTarget `json:"traffic"`
	// Routed names the Revision each Traffic target routes to now, by the
	// object's status ("" where status does not say).
	Routed []string `json:"routed,omitempty"`
	// Stable is the Revision that carried the traffic before the candidate,
	// empty when the candidate is the target's first Revision.
	Stable string `json:"stable,omitempty"`
	// CandidateGeneration orders Revisions of one Configuration, so an old
	// Revision's late event cannot supersede a newer candidate.
	CandidateGeneration int64 `json:"candidateGeneration"`
	// Events says whether the worker sends progress events.
	Events bool `json:"events,omitempty"`
	// StablePods is the stable Revision's Ready pods, and StableBounds and
	// CandidateBounds the two Revisions' scale bounds as their templates
	// set them: what a capacity rollout stages from and restores.
	StablePods      int32               `json:"stablePods,omitempty"`
	StableBounds    knative.ScaleBounds `json:"stableBounds,omitzero"`
	CandidateBounds knative.ScaleBounds `json:"candidateBounds,omitzero"`
	// Release names the candidate's release across clusters (ReleaseOf).
	Release string `json:"release,omitempty"`
	// Candidate is the Revision an undo goes back to, when the input named none.
	Candidate string `json:"candidate,omitempty"`
	// CandidateReady says the candidate was Ready when it was read: an
	// undo goes on at once, as no event will tell it.
	CandidateReady bool `json:"candidateReady,omitempty"`
	// Revert is set when the policy's rollback window holds a Revision of
	// the candidate's template: the rollout goes to 100% in one write.
	Revert *config.Stint `json:"revert,omitempty"`
}

// RecordInput records on Object that Revision had 100% of the traffic
// until Until (config.AnnotationStableHistory).
type RecordInput struct {
	Object   knative.ObjectRef `json:"object"`
	Revision string            `json:"revision"`
	Until    time.Time         `json:"until"`
}

// MarkInput records on Object how the rollout of Revision ended.
type MarkInput struct {
	Object   knative.ObjectRef `json:"object"`
	Revision string            `json:"revision"`
	Outcome  string            `json:"outcome"`
}

// AwaitRevisionInput asks for a Revision's state once it is Ready, failed or
// gone, waiting at most For. A change the watch sees is answered Grace
// later: the Revision's own CloudEvent, which the receiver forwards, is how
// the workflow should learn of it, and the watch is the net for an event
// that is lost.
type AwaitRevisionInput struct {
	knative.RevisionRef
	For   time.Duration `json:"for"`
	Grace time.Duration `json:"grace,omitempty"`
}

// SetTrafficInput asks to change Object's traffic from Expected to Desired.
// Expected is what sluice believes is live; if the object shows something else
// someone changed it, and unless Force is set sluice stops instead of
// overwriting their change.
type SetTrafficInput struct {
	Object   knative.ObjectRef         `json:"object"`
	Expected []servingv1.TrafficTarget `json:"expected"`
	Desired  []servingv1.TrafficTarget `json:"desired"`
	Force    bool                      `json:"force,omitempty"`
}

// SetTrafficResult reports the object's generation after the write, which
// verification waits for.
type SetTrafficResult struct {
	Generation int64 `json:"generation"`
	Changed    bool  `json:"changed"`
}

// VerifyInput asks whether Object's status shows Desired at Generation or later.
type VerifyInput struct {
	Object     knative.ObjectRef         `json:"object"`
	Desired    []servingv1.TrafficTarget `json:"desired"`
	Generation int64                     `json:"generation"`
}

// ApplyTrafficInput writes and then verifies, for at most VerifyFor.
type ApplyTrafficInput struct {
	SetTrafficInput
	VerifyFor time.Duration `json:"verifyFor"`
}

// ApplyTrafficResult says what was written, and whether the status showed it
// within VerifyFor.
type ApplyTrafficResult struct {
	SetTrafficResult
	Visible bool `json:"visible"`
	// Lacks, when the traffic is not visible yet, says what the status
	// still lacked when the watch ended.
	Lacks string `json:"lacks,omitempty"`
}

// LiveTraffic is a traffic object's spec.traffic as last read, and the
// Revision each target routes to by its status ("" where it does not say).
type LiveTraffic struct {
	Spec   []servingv1.TrafficTarget `json:"spec"`
	Routed []string                  `json:"routed,omitempty"`
	// URLs are the URLs the object's status gives its tags, by tag.
	URLs map[string]string `json:"urls,omitempty"`
}

// AwaitTrafficInput asks to be told when Object's spec.traffic is no longer
// Expected, waiting at most For.
type AwaitTrafficInput struct {
	Object   knative.ObjectRef         `json:"object"`
	Expected []servingv1.TrafficTarget `json:"expected"`
	For      time.Duration             `json:"for"`
}

// TrafficChange says whether the traffic changed (and to what) or the
// object is gone.
type TrafficChange struct {
	Changed bool                      `json:"changed"`
	Found   []servingv1.TrafficTarget `json:"found,omitempty"`
	Gone    bool                      `json:"gone,omitempty"`
}
