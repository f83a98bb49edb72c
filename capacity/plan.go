// Package capacity derives the stages of a capacity-aware rollout: how many
// pods the candidate and the stable Revision may run at each stage, and the
// candidate's traffic share there, so that a rollout never needs twice the
// stable's pods. It is pure arithmetic; the workflow applies the stages.
package capacity

import (
	"fmt"
	"math"
)

// Strategy orders the moves of a stage.
type Strategy string

const (
	// Availability brings the candidate's pods up, then shifts traffic,
	// then releases the stable's: at most Surge pods above the stable's
	// count, and every Revision always has the pods for its share.
	Availability Strategy = "availability"
	// Resource releases the stable's pods first, then brings the
	// candidate's up: never above the stable's count, at the price of the
	// stable serving its share with fewer pods for a moment.
	Resource Strategy = "resource"
)

// Stage is one stage of the plan: the pods each Revision is bounded to once
// the stage is reached, and the candidate's traffic share then.
type Stage struct {
	// Candidate and Stable are pod counts (min-scale = max-scale).
	Candidate int32 `json:"candidate"`
	Stable    int32 `json:"stable"`
	// Weight is the candidate's share of the traffic, in percent.
	Weight int64 `json:"weight"`
}

// SurgePods is the surge allowance in pods for a stable Revision of r pods:
// n pods, or percent of r rounded up; at least 1. The Resource strategy has
// none.
func SurgePods(strategy Strategy, r int32, pods int32, percent int64) int32 {
	if strategy == Resource {
		return 0
	}
	s := pods
	if percent > 0 {
		s = int32(math.Ceil(float64(r) * float64(percent) / 100))
	}
	return max(s, 1)
}

// Plan derives the stages for a stable Revision running r pods. Without
// weights each stage moves surge pods (one when surge is 0), and the
// candidate's share is its share of the pods, rounded to the nearest
// percent: r=8, surge 1 gives 13%, 25%, 38%, ... 100%. With weights (the
// policy's steps, ending at 100) each stage's candidate pods are the ceiling
// of its share of r, so the share never exceeds what its pods serve; with
// Availability the stable keeps the ceiling of its own share too (which may
// take one pod of the surge), with Resource the rest of r.
func Plan(strategy Strategy, r, surge int32, weights []int64) ([]Stage, error) {
	if r < 1 {
		return nil, fmt.Errorf("the stable Revision runs %d pods: capacity stages need at least 1", r)
	}
	if len(weights) == 0 {
		move := max(surge, 1)
		var out []Stage
		for c := move; ; c += move {
			c = min(c, r)
			out = append(out, Stage{Candidate: c, Stable: r - c, Weight: share(c, r)})
			if c == r {
				return out, nil
			}
		}
	}
	out := make([]Stage, 0, len(weights))
	for _, w := range weights {
		if w < 1 || w > 100 {
			return nil, fmt.Errorf("weight %d%%: must be between 1 and 100", w)
		}
		c := podsFor(w, r)
		st := r - c
		if strategy == Availability {
			st = podsFor(100-w, r)
		}
		if st == 0 && w < 100 {
			return nil, fmt.Errorf("at %d%% the candidate needs all %d pods and the stable none while it still serves %d%%: "+
				"the %s strategy needs more pods, or steps that leave the stable a pod", w, r, 100-w, strategy)
		}
		out = append(out, Stage{Candidate: c, Stable: st, Weight: w})
	}
	if out[len(out)-1].Weight != 100 {
		return nil, fmt.Errorf("the last step is %d%%: it must be 100", out[len(out)-1].Weight)
	}
	return out, nil
}

// podsFor is the pods that serve w percent of what r pods serve, rounded up.
func podsFor(w int64, r int32) int32 {
	return int32((w*int64(r) + 99) / 100)
}

// share is c of r pods in percent, rounded half up.
func share(c, r int32) int64 {
	return (int64(c)*200 + int64(r)) / (int64(r) * 2)
}

// Peak is the most pods the two Revisions run at once while going from
// stage from to stage to with the given strategy. Availability raises the
// candidate before it lowers the stable; Resource lowers the stable first.
func Peak(strategy Strategy, from, to Stage) int32 {
	if strategy == Resource {
		return max(from.Candidate+from.Stable, to.Stable+from.Candidate, to.Candidate+to.Stable)
	}
	return max(from.Candidate+from.Stable, to.Candidate+from.Stable, to.Candidate+to.Stable)
}
