package workflows

import (
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// pinLatest replaces every latestRevision target with the stable Revision by
// name. While a latestRevision target is live, Knative would send its whole
// share to the candidate the moment it is Ready, ahead of every step.
func pinLatest(traffic []servingv1.TrafficTarget, stable string) []servingv1.TrafficTarget {
	out := cloneTraffic(traffic)
	if stable == "" {
		return out
	}
	for i := range out {
		if out[i].LatestRevision != nil && *out[i].LatestRevision {
			out[i].LatestRevision = ptr(false)
			out[i].RevisionName = stable
			out[i].ConfigurationName = ""
		}
	}
	return out
}

// trafficAt is the traffic list with the candidate at weight percent of the
// stable Revision's share. Every other target — extra Revisions, tags, their
// percents — stays as it is in baseline, so a step only ever moves traffic
// from stable to candidate.
func trafficAt(baseline []servingv1.TrafficTarget, stable, candidate string, weight int64) []servingv1.TrafficTarget {
	var stableShare int64
	for _, t := range baseline {
		if t.RevisionName == stable && t.Percent != nil {
			stableShare += *t.Percent
		}
	}
	if stable == "" {
		// No stable Revision (the target's first): the candidate takes what no
		// named Revision holds.
		stableShare = 100
		for _, t := range baseline {
			if t.RevisionName != "" && t.Percent != nil {
				stableShare -= *t.Percent
			}
		}
	}
	// Round to the nearest percent, so a small first step on a partial
	// share still sends the candidate some traffic.
	move := min((stableShare*weight+50)/100, stableShare)
	out := make([]servingv1.TrafficTarget, 0, len(baseline)+1)
	left := move
	for _, t := range baseline {
		t = copyTarget(t)
		if stable == "" && t.RevisionName == "" {
			continue // a latestRevision target with nothing to resolve to
		}
		if t.RevisionName == stable && t.Percent != nil && left > 0 {
			take := min(left, *t.Percent)
			t.Percent = ptr(*t.Percent - take)
			left -= take
			if *t.Percent == 0 && t.Tag == "" {
				continue // an untagged target at 0% routes nothing
			}
		}
		out = append(out, t)
	}
	return append(out, servingv1.TrafficTarget{RevisionName: candidate, LatestRevision: ptr(false), Percent: ptr(move)})
}

// rollbackTraffic is the traffic to restore: exactly the list from before the
// rollout, unless a latestRevision target in it would now resolve to a Ready
// candidate — then that target is pinned to the stable Revision, or the
// rollback would send the whole share to the Revision being rolled back.
func rollbackTraffic(st *State) []servingv1.TrafficTarget {
	if st.CandidateReady {
		return pinLatest(st.Original, st.Stable)
	}
	return cloneTraffic(st.Original)
}

func cloneTraffic(in []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	if in == nil {
		return nil
	}
	out := make([]servingv1.TrafficTarget, len(in))
	for i, t := range in {
		out[i] = copyTarget(t)
	}
	return out
}

func copyTarget(t servingv1.TrafficTarget) servingv1.TrafficTarget {
	if t.Percent != nil {
		t.Percent = ptr(*t.Percent)
	}
	if t.LatestRevision != nil {
		t.LatestRevision = ptr(*t.LatestRevision)
	}
	t.URL = nil
	return t
}

func ptr[T any](v T) *T { return &v }
