package config

import (
	"strings"
	"time"
)

// Annotation keys read from the rollout target. In Service mode they sit on the
// Knative Service; in Route mode on the Configuration whose Revisions roll out.
const (
	Prefix = "sluice.dev/"

	// AnnotationRollout opts the target in: "enabled" (or "true").
	AnnotationRollout = Prefix + "rollout"
	// AnnotationSteps lists the candidate's traffic weights, e.g. "10,25,50,100".
	AnnotationSteps = Prefix + "steps"
	// AnnotationHold is how long each step holds before the next one, e.g. "2m".
	// The last step (100%) ends the rollout and does not hold.
	AnnotationHold = Prefix + "hold"
	// AnnotationStepHolds overrides the hold of given steps, keyed by weight: "25=5m,50=10m".
	AnnotationStepHolds = Prefix + "step-holds"
	// AnnotationGates lists the weights that wait for a promote before they are set: "50,100".
	AnnotationGates = Prefix + "gates"
	// AnnotationProgressDeadline bounds the wait for the candidate Revision to become Ready.
	AnnotationProgressDeadline = Prefix + "progress-deadline"
	// AnnotationVerifyTimeout bounds the wait for a traffic change to show in the object's status.
	AnnotationVerifyTimeout = Prefix + "verify-timeout"
	// AnnotationDeadline bounds the whole rollout, from start to 100%.
	AnnotationDeadline = Prefix + "deadline"
	// AnnotationRoute names the Route that a Configuration's Revisions roll out on (Route mode).
	AnnotationRoute = Prefix + "route"
)

// AnnotationEnded is the annotation sluice puts on the traffic object (the
// Service, or the Route in Route mode) when a rollout rolls its candidate
// back, aborts it or fails: "<revision>=<outcome>". A later event about that
// Revision starts no rollout again; `sluice start` still does, on purpose.
// It is not on the Revision: Knative copies a Revision's labels and
// annotations into its Deployment's pod template, so marking the Revision
// would restart its pods.
const AnnotationEnded = Prefix + "ended"

// Ended is the value of AnnotationEnded for a candidate and its outcome.
func Ended(revision, outcome string) string { return revision + "=" + outcome }

// EndedOutcome is the outcome AnnotationEnded's value gives revision, or ""
// when it names another Revision.
func EndedOutcome(value, revision string) string {
	rev, outcome, ok := strings.Cut(value, "=")
	if !ok || rev != revision {
		return ""
	}
	return outcome
}

// Policy is a validated rollout policy: how a candidate Revision takes traffic.
type Policy struct {
	Steps            []Step        `json:"steps"`
	ProgressDeadline time.Duration `json:"progressDeadline"`
	VerifyTimeout    time.Duration `json:"verifyTimeout"`
	Deadline         time.Duration `json:"deadline"`
	// Analysis is nil unless the target sets sluice.dev/analysis.
	Analysis *Analysis `json:"analysis,omitempty"`
	// Capacity is nil unless the target sets sluice.dev/capacity.
	Capacity *Capacity `json:"capacity,omitempty"`
	// Waves is nil unless the target sets sluice.dev/waves.
	Waves *Waves `json:"waves,omitempty"`
	// RollbackWindow is 0 unless the target sets sluice.dev/rollback-window.
	RollbackWindow time.Duration `json:"rollbackWindow,omitempty"`
	// Preview is the candidate's tag before its first share, empty unless
	// the target sets sluice.dev/preview.
	Preview string `json:"preview,omitempty"`
	// PreviewHold, with sluice.dev/preview-hold, holds the preview at 0%
	// with analysis before the first step.
	PreviewHold time.Duration `json:"previewHold,omitempty"`
	// AnalysisTemplate, with sluice.dev/analysis-template, names the shared
	// document Analysis is read from when the rollout starts; until then
	// Analysis is nil.
	AnalysisTemplate *TemplateRef `json:"analysisTemplate,omitempty"`
}

// Step is one stage of a rollout: the candidate's share of traffic, how long it
// holds there, and whether a person must promote before it is applied.
type Step struct {
	Weight int64         `json:"weight"`
	Hold   time.Duration `json:"hold"`
	Gate   bool          `json:"gate,omitempty"`
}

// TotalHold is the least time a rollout without gates takes: the sum of the
// holds of every step but the last, since reaching 100% ends the rollout.
func (p Policy) TotalHold() time.Duration {
	var total time.Duration
	for i, s := range p.Steps {
		if i < len(p.Steps)-1 {
			total += s.Hold
		}
	}
	return total
}
