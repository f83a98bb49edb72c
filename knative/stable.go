package knative

import (
	"sort"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Stable picks the Revision that serves the most traffic besides the
// candidate. A latestRevision target stands for the newest Ready Revision older
// than the candidate (none when revs is nil): reading the Route's status
// instead would race with Knative, which may already have moved it to the
// candidate. The rollout decides with every Revision of the Configuration;
// the receiver guesses with none, for the rollout's summary in the UI.
func Stable(traffic []servingv1.TrafficTarget, candidate string, revs map[string]*servingv1.Revision) string {
	share := map[string]int64{}
	for _, t := range traffic {
		name := t.RevisionName
		if IsLatest(t) {
			name = newestReadyBefore(revs, candidate)
		}
		if name != "" && name != candidate {
			if t.Percent != nil {
				share[name] += *t.Percent
			}
		}
	}
	best, bestShare := "", int64(-1)
	names := make([]string, 0, len(share))
	for n := range share {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if share[n] > bestShare {
			best, bestShare = n, share[n]
		}
	}
	if best == "" {
		best = newestReadyBefore(revs, candidate)
	}
	return best
}

func newestReadyBefore(revs map[string]*servingv1.Revision, candidate string) string {
	limit := int64(1<<62 - 1)
	if c, ok := revs[candidate]; ok {
		limit = ReadRevisionLabels(c.Labels).Generation
	}
	best, bestGen := "", int64(-1)
	for name, r := range revs {
		g := ReadRevisionLabels(r.Labels).Generation
		if name == candidate || g >= limit || !r.IsReady() {
			continue
		}
		if g > bestGen || (g == bestGen && name > best) {
			best, bestGen = name, g
		}
	}
	return best
}
