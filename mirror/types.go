// Package mirror keeps a Rollout resource (rollouts.sluice.dev) beside each
// target sluice rolls out, so kubectl, GitOps tools and anything else that
// reads Kubernetes objects see a rollout where they look. Temporal stays the
// truth: the resource is a view the worker writes from the rollout's
// progress, rebuilds from the workflow when it is deleted, and never waits
// on.
package mirror

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluicehq/sluice/api"
)

// The resource's API coordinates. Its kind is the name of the workflow it
// mirrors.
const (
	Group    = "sluice.dev"
	Version  = "v1alpha1"
	Kind     = api.RolloutWorkflow
	Resource = "rollouts"
)

// GVR names the resource for dynamic clients.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// Condition types, following kstatus (sigs.k8s.io/cli-utils/pkg/kstatus):
// Ready is True once the candidate has all the traffic; Reconciling is True
// while a rollout runs (paused or not); Stalled is True after a rollout
// ended without its candidate at 100% (rolled back, aborted, failed).
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// Rollout is the resource: one per target, named as the target, owned by it.
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitzero"`
}

// Spec names the target the Rollout mirrors (sluice writes it, and the
// sluice-rollout-commands admission policy keeps it), and carries the last
// command asked through Kubernetes.
type Spec struct {
	Target Target `json:"target"`
	// Command asks the rollout to promote, pause, resume or abort:
	// Kubernetes RBAC (patch on rollouts) decides who may, the admission
	// policy makes By the requester's own user name, and the worker turns
	// it into the Temporal update and answers in status.command.
	Command *CommandRequest `json:"command,omitempty"`
}

// CommandRequest is a command asked on the Rollout resource.
type CommandRequest struct {
	// ID is the asker's, unique per command: the worker acts once per ID.
	ID string `json:"id"`
	// Name is promote, promote-full, pause, resume or abort.
	Name string `json:"name"`
	// By is the requester's Kubernetes user name (checked on admission).
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// CommandResult is the rollout's answer to the last command asked on the
// resource.
type CommandResult struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	By       string `json:"by"`
	Accepted bool   `json:"accepted"`
	// Message is the rollout's answer, or why the command was refused.
	Message string      `json:"message"`
	At      metav1.Time `json:"at"`
}

// Target is the Knative Service, or Configuration (Route mode), that the
// service owner opted in.
type Target struct {
	// APIVersion and Kind are serving.knative.dev/v1 Service or Configuration.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
}

// Status is the last rollout of the target as sluice last saw it.
type Status struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is what to show a person: the workflow's phase, or Paused.
	Phase     string `json:"phase,omitempty"`
	Paused    bool   `json:"paused,omitempty"`
	Candidate string `json:"candidate,omitempty"`
	Stable    string `json:"stable,omitempty"`
	// Weight is the candidate's share of the traffic, in percent.
	Weight int64 `json:"weight"`
	// Step counts from 1 (0 before the first); Progress is "step/steps",
	// for a printer column.
	Step      int    `json:"step"`
	StepCount int    `json:"stepCount"`
	Progress  string `json:"progress,omitempty"`
	// Traffic is the traffic split as sluice last wrote it.
	Traffic string `json:"traffic,omitempty"`
	// StepStartedAt is when the current step's share was written;
	// HoldUntil when its hold ends.
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`
	HoldUntil     *metav1.Time `json:"holdUntil,omitempty"`
	// GateAfterHold says the hold ends at a gate: the worker reads the
	// workflow then, since no progress event tells of the wait.
	GateAfterHold bool `json:"gateAfterHold,omitempty"`
	// Analysis is the last analysis round's verdict.
	Analysis *Analysis `json:"analysis,omitempty"`
	// Outcome is set once the rollout ended (Succeeded, RolledBack,
	// Aborted, Superseded, Failed); Message says why, or what the rollout
	// waits for.
	Outcome string `json:"outcome,omitempty"`
	Message string `json:"message,omitempty"`
	// Ended is "true" once the rollout ended: a field a pipeline can wait
	// for with kubectl wait --for=jsonpath.
	Ended bool `json:"ended"`
	// LastCommand is the last command a person or program gave.
	LastCommand *Command `json:"lastCommand,omitempty"`
	// Command answers spec.command, once the worker has acted on it.
	Command *CommandResult `json:"command,omitempty"`
	// WorkflowID is the rollout's Temporal workflow; URL its page in the
	// Temporal UI, when the worker knows the UI's address.
	WorkflowID string `json:"workflowID,omitempty"`
	URL        string `json:"url,omitempty"`
	// RolloutID identifies one rollout of one candidate; Sequence its
	// progress event the status was written from (0 when it was read from
	// the workflow); ObservedAt the rollout's time of that state. Together
	// they keep a late write of an older state from replacing a newer one.
	RolloutID  string             `json:"rolloutID,omitempty"`
	Sequence   int                `json:"sequence,omitempty"`
	ObservedAt *metav1.MicroTime  `json:"observedAt,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Analysis is one analysis round's result.
type Analysis struct {
	// Verdict is Passed, Failed or Inconclusive: the worst of the round's
	// measurements.
	Verdict string `json:"verdict"`
	Message string `json:"message,omitempty"`
}

// Command is who commanded what, and why.
type Command struct {
	Name   string      `json:"name"`
	By     string      `json:"by"`
	Reason string      `json:"reason,omitempty"`
	At     metav1.Time `json:"at"`
}
