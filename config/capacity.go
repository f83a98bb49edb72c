package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/capacity"
)

// Capacity-aware rollouts (docs/capacity.md): the candidate's pods and the
// stable's move with the traffic, stage by stage, so a rollout never needs
// twice the stable's pods.
const (
	// AnnotationCapacity turns capacity mode on with a strategy:
	// "availability" or "resource".
	AnnotationCapacity = Prefix + "capacity"
	// AnnotationCapacitySurge is how many pods above the stable's count the
	// availability strategy may run: a count ("2") or a share ("10%"), at
	// least one pod.
	AnnotationCapacitySurge = Prefix + "capacity-surge"
	// AnnotationCapacityTimeout bounds the wait for a stage's pods.
	AnnotationCapacityTimeout = Prefix + "capacity-timeout"
	// AnnotationCapacityOnTimeout says what a stage whose pods do not come
	// does: "pause" (the default) or "rollback".
	AnnotationCapacityOnTimeout = Prefix + "capacity-on-timeout"
	// AnnotationTemplateScale is written by sluice's admission webhook on a
	// new Revision it bounds to one pod: the min-scale and max-scale its
	// template asked for, as JSON, which the rollout gives back at its end.
	AnnotationTemplateScale = Prefix + "template-scale"
)

// Capacity is the capacity policy of a rollout.
type Capacity struct {
	Strategy capacity.Strategy `json:"strategy"`
	// SurgePods or SurgePercent is the surge allowance (availability only).
	SurgePods    int32         `json:"surgePods,omitempty"`
	SurgePercent int64         `json:"surgePercent,omitempty"`
	StageTimeout time.Duration `json:"stageTimeout"`
	// RollbackOnTimeout rolls back a stage whose pods do not come in time;
	// otherwise the rollout pauses.
	RollbackOnTimeout bool `json:"rollbackOnTimeout,omitempty"`
	// StepsFromPods says the plan's steps are derived from the stable's pod
	// count; false when the target lists its steps.
	StepsFromPods bool `json:"stepsFromPods,omitempty"`
}

// defaultCapacityTimeout is how long a stage waits for its pods by default:
// long enough for an image pull and a slow readiness probe.
const defaultCapacityTimeout = 5 * time.Minute

// parseCapacity reads the capacity policy; nil when capacity mode is off.
func parseCapacity(annotations map[string]string, fail func(error)) *Capacity {
	raw, ok := annotations[AnnotationCapacity]
	if !ok {
		for _, key := range []string{AnnotationCapacitySurge, AnnotationCapacityTimeout, AnnotationCapacityOnTimeout} {
			if v, set := annotations[key]; set {
				fail(&FieldError{Key: key, Message: "has no effect without " + AnnotationCapacity + ": set it to availability or resource", Value: v})
			}
		}
		return nil
	}
	c := &Capacity{Strategy: capacity.Strategy(strings.ToLower(strings.TrimSpace(raw))), StageTimeout: defaultCapacityTimeout, SurgePercent: 10}
	switch c.Strategy {
	case capacity.Availability, capacity.Resource:
	default:
		fail(&FieldError{Key: AnnotationCapacity, Message: `must be "availability" (bring the candidate's pods up before moving traffic) or "resource" (never above today's pod count)`, Value: raw})
		return nil
	}
	if v, set := annotations[AnnotationCapacitySurge]; set {
		if c.Strategy == capacity.Resource {
			fail(&FieldError{Key: AnnotationCapacitySurge, Message: "has no effect with the resource strategy, which never runs more pods than the stable has; remove it or use availability", Value: v})
		} else {
			c.SurgePods, c.SurgePercent = 0, 0
			fail(parseSurge(v, c))
		}
	}
	if c.Strategy == capacity.Resource {
		c.SurgePercent = 0
	}
	c.StageTimeout = durationOr(annotations, AnnotationCapacityTimeout, c.StageTimeout, false, fail)
	if v, set := annotations[AnnotationCapacityOnTimeout]; set {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "pause":
		case "rollback":
			c.RollbackOnTimeout = true
		default:
			fail(&FieldError{Key: AnnotationCapacityOnTimeout, Message: `must be "pause" or "rollback"`, Value: v})
		}
	}
	_, listed := annotations[AnnotationSteps]
	c.StepsFromPods = !listed
	if c.StepsFromPods {
		// The stages are known only once the stable's pods are counted.
		for _, key := range []string{AnnotationGates, AnnotationStepHolds} {
			if v, set := annotations[key]; set {
				fail(&FieldError{Key: key, Message: "names steps, but a capacity rollout without " + AnnotationSteps +
					" derives its steps from the stable's pods; list " + AnnotationSteps + " too, or drop it", Value: v})
			}
		}
	}
	return c
}

func parseSurge(v string, c *Capacity) error {
	s := strings.TrimSpace(v)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(pct), 10, 64)
		if err != nil || n < 1 || n > 100 {
			return &FieldError{Key: AnnotationCapacitySurge, Message: `must be a share from 1% to 100% ("10%") or a number of pods ("2")`, Value: v}
		}
		c.SurgePercent = n
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 {
		return &FieldError{Key: AnnotationCapacitySurge, Message: `must be a number of pods of 1 or more ("2") or a share ("10%")`, Value: v}
	}
	c.SurgePods = int32(n)
	return nil
}

// Stages are the capacity stages a rollout of p runs for a stable Revision
// of stablePods pods, as the workflow derives them when the rollout starts:
// from the pods and the surge, or from the listed steps.
func (p Policy) Stages(stablePods int32) ([]capacity.Stage, error) {
	c := p.Capacity
	surge := capacity.SurgePods(c.Strategy, stablePods, c.SurgePods, c.SurgePercent)
	var weights []int64
	if !c.StepsFromPods {
		for _, s := range p.Steps {
			weights = append(weights, s.Weight)
		}
	}
	return capacity.Plan(c.Strategy, stablePods, surge, weights)
}
