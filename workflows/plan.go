package workflows

import (
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
)

// candidateShare is the candidate's share, in percent, of the traffic the
// stable and candidate Revisions hold together in a list: the weight a
// rollout stands at on that list.
func candidateShare(traffic []servingv1.TrafficTarget, stable, candidate string) int64 {
	var s, c int64
	for _, t := range traffic {
		switch {
		case t.RevisionName == candidate:
			c += knative.Percent(t)
		case t.RevisionName == stable || (stable == "" && knative.IsLatest(t)):
			s += knative.Percent(t)
		}
	}
	if s+c == 0 {
		return 0
	}
	return (c*100 + (s+c)/2) / (s + c)
}

// trafficAt is the traffic list with the candidate at weight percent of the
// traffic the stable and candidate Revisions hold together in base. Every
// other target — extra Revisions, tags, their percents — stays as it is, so
// a step only ever moves traffic between stable and candidate. base may
// already give the candidate a share (a list an operator edited, or one
// Knative routed before sluice pinned it): the step then moves only the
// difference, either way. With weight 0 it is base with the candidate's
// traffic back on the stable Revision.
//
// With no stable Revision (the target's first), the pool is what
// latestRevision targets hold: their shares move to the candidate, and a
// tagged one stays, at 0%, following the latest Revision.
func trafficAt(base []servingv1.TrafficTarget, stable, candidate string, weight int64) []servingv1.TrafficTarget {
	isStable := func(t servingv1.TrafficTarget) bool {
		if stable == "" {
			return knative.IsLatest(t)
		}
		return t.RevisionName == stable
	}
	var pool, cand int64
	for _, t := range base {
		switch {
		case t.RevisionName == candidate:
			cand += knative.Percent(t)
			pool += knative.Percent(t)
		case isStable(t):
			pool += knative.Percent(t)
		}
	}
	// Round to the nearest percent, so a small first step on a partial
	// share still sends the candidate some traffic.
	move := min((pool*weight+50)/100, pool) - cand
	if move < 0 && stable == "" {
		return knative.CloneTraffic(base) // no stable Revision to give the share back to
	}
	from, to, receiver := isStable, func(t servingv1.TrafficTarget) bool { return t.RevisionName == candidate }, candidate
	if move < 0 {
		from, to, receiver, move = to, isStable, stable, -move
	}
	out := make([]servingv1.TrafficTarget, 0, len(base)+1)
	left := move
	for _, t := range knative.CloneTraffic(base) {
		if from(t) && left > 0 && knative.Percent(t) > 0 {
			take := min(left, knative.Percent(t))
			t.Percent = new(knative.Percent(t) - take)
			left -= take
			if knative.Percent(t) == 0 && t.Tag == "" {
				continue // an untagged target at 0% routes nothing
			}
		}
		out = append(out, t)
	}
	if move == 0 {
		return out
	}
	// The moved share goes to the first untagged target of its Revision,
	// or to a new one at the end.
	for i := range out {
		if to(out[i]) && out[i].Tag == "" && !(stable == "" && knative.IsLatest(out[i])) {
			out[i].Percent = new(knative.Percent(out[i]) + move)
			return out
		}
	}
	return append(out, servingv1.TrafficTarget{RevisionName: receiver, LatestRevision: new(false), Percent: new(move)})
}

// rollbackTraffic is the traffic to restore: exactly the list from before the
// rollout (or, after an operator resumed a drifted rollout, the list they
// left with the candidate's share back on the stable Revision), unless a
// latestRevision target in it would now resolve to a Ready candidate — then
// that target is pinned to the stable Revision, or the rollback would send
// the whole share to the Revision being rolled back.
func rollbackTraffic(st *state) []servingv1.TrafficTarget {
	if st.CandidateReady {
		return pinLatest(st.Original, nil, st.Stable)
	}
	return knative.CloneTraffic(st.Original)
}

// pinsLatest reports whether restoring list pins a latestRevision target of
// original by name: the target no longer follows the latest Revision.
func pinsLatest(original, restored []servingv1.TrafficTarget) bool {
	for i, t := range original {
		if knative.IsLatest(t) && i < len(restored) && !knative.IsLatest(restored[i]) {
			return true
		}
	}
	return false
}

// pinLatest is the traffic with its live latestRevision targets pinned
// (knative.PinLatest).
func pinLatest(traffic []servingv1.TrafficTarget, resolved []string, to string) []servingv1.TrafficTarget {
	out, _ := knative.PinLatest(traffic, resolved, to)
	return out
}
