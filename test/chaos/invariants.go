package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// write is one write of sluice's on a Service that the API server took,
// from its audit log.
type write struct {
	Service string
	At      time.Time
	AuditID string
	// Traffic is the traffic it sent; HasTraffic is false for a write of
	// metadata only (the annotation that says how a rollout ended).
	Traffic    []servingv1.TrafficTarget
	HasTraffic bool
}

// run is one run of a Service's rollout workflow, as Temporal recorded it.
type run struct {
	Service      string
	RunID        string
	Start, Close time.Time
}

// evidence is what the checks read once the run is over.
type evidence struct {
	Writes []write
	// Ready is when each Revision's status first said Ready, as Knative's
	// controller wrote it.
	Ready map[string]time.Time
	Runs  []run
	// Progress are the progress events received, duplicates included.
	Progress []cloudevents.Event
	// Traffic is each Service's spec.traffic at the end.
	Traffic map[string][]servingv1.TrafficTarget
	// Bystanders are Services no rollout may touch.
	Bystanders []string
	// Pods are each Revision's pod counts over time, from its Deployment's
	// status; Counted its Ready pods as Knative's own status said; Bounded
	// says which Revisions sluice's admission webhook bounded as they were
	// created.
	Pods    map[string][]podCount
	Counted map[string][]podCount
	Bounded map[string]bool
	// Faults are the faults injected.
	Faults []fault
	// Trail says what became of the events about a Revision on their way
	// to the receiver, and what it answered.
	Trail func(revision string) []string
}

// violation is one invariant broken: by which rollout, and the evidence.
type violation struct {
	Invariant string
	Rollout   string
	Evidence  string
}

func (v violation) String() string {
	return fmt.Sprintf("%s: %s\n    %s", v.Rollout, v.Invariant, strings.ReplaceAll(v.Evidence, "\n", "\n    "))
}

// check runs every invariant over the rollouts expects describes.
func check(expects []*expect, ev evidence) []violation {
	var out []violation
	ended := checkEnded(expects)
	for i, v := range ended {
		if ev.Trail != nil {
			ended[i].Evidence += "\nits Revision's events: " + strings.Join(ev.Trail(v.Rollout), "\n  ")
		}
	}
	out = append(out, ended...)
	out = append(out, checkFinalTraffic(expects, ev)...)
	out = append(out, checkReadyFirst(ev)...)
	out = append(out, checkWithinRuns(expects, ev)...)
	out = append(out, checkShares(expects, ev)...)
	out = append(out, checkProgress(expects, ev)...)
	out = append(out, checkPods(expects, ev)...)
	return out
}

// checkEnded: every rollout ended, as its plan implies, saying why.
func checkEnded(expects []*expect) []violation {
	var out []violation
	for _, e := range expects {
		switch {
		case e.Ended.IsZero():
			out = append(out, violation{"it ended", e.Candidate, fmt.Sprintf("plan %s; still running when the run ended; %s", e.Plan, strings.Join(e.Notes, "; "))})
		case e.Got != e.Outcome && (e.Or == "" || e.Got != e.Or):
			out = append(out, violation{"the outcome its plan implies", e.Candidate,
				fmt.Sprintf("plan %s: want %s, got %s (%s); %s", e.Plan, e.Outcome, e.Got, e.GotReason, strings.Join(e.Notes, "; "))})
		case e.GotReason == "":
			out = append(out, violation{"the reason says why", e.Candidate, fmt.Sprintf("ended %s with no reason", e.Got)})
		case e.Got == e.Outcome && !strings.Contains(e.GotReason, e.ReasonHas):
			out = append(out, violation{"the reason says why", e.Candidate, fmt.Sprintf("plan %s ended %s: %q does not say %q", e.Plan, e.Got, e.GotReason, e.ReasonHas)})
		case len(e.Notes) > 0:
			out = append(out, violation{"the plan went as planned", e.Candidate, strings.Join(e.Notes, "; ")})
		}
	}
	return out
}

// last returns each Service's last rollout.
func lastByService(expects []*expect) map[string]*expect {
	out := map[string]*expect{}
	for _, e := range expects {
		if p, ok := out[e.Service]; !ok || p.Deployed.Before(e.Deployed) || p.Deployed.Equal(e.Deployed) {
			out[e.Service] = e
		}
	}
	return out
}

// checkFinalTraffic: each Service's traffic is what its last rollout's
// outcome promises, its tagged target untouched; bystanders are as made.
func checkFinalTraffic(expects []*expect, ev evidence) []violation {
	var out []violation
	for name, e := range lastByService(expects) {
		if e.Ended.IsZero() {
			continue // reported as not ended
		}
		live := e.Stable
		if e.Got == api.OutcomeSucceeded {
			live = e.Candidate
		}
		want := []servingv1.TrafficTarget{{RevisionName: live, Percent: new(int64(100))}}
		if e.Plan != planFirst {
			want = append(want, servingv1.TrafficTarget{RevisionName: name + "-00001", Percent: new(int64(0)), Tag: "base"})
		}
		if got, w := sortedTraffic(ev.Traffic[name]), sortedTraffic(want); got != w {
			out = append(out, violation{"the final traffic is what the outcome promises", e.Candidate,
				fmt.Sprintf("%s ended %s: traffic %s, want %s", name, e.Got, got, w)})
		}
	}
	for _, name := range ev.Bystanders {
		if got := sortedTraffic(ev.Traffic[name]); got != "latest=100%" {
			out = append(out, violation{"other targets untouched", name, "traffic " + got})
		}
	}
	return out
}

func sortedTraffic(t []servingv1.TrafficTarget) string {
	parts := strings.Split(knative.FormatTraffic(t), ", ")
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// checkReadyFirst: no write gave a share to a Revision before Knative said
// it was Ready.
func checkReadyFirst(ev evidence) []violation {
	var out []violation
	for _, w := range ev.Writes {
		for _, t := range w.Traffic {
			if t.RevisionName == "" || t.Percent == nil || *t.Percent == 0 {
				continue
			}
			ready, ok := ev.Ready[t.RevisionName]
			if !ok || !ready.Before(w.At) {
				out = append(out, violation{"no share to a Revision that was not Ready", t.RevisionName,
					fmt.Sprintf("audit %s at %s gave it %d%% of %s; Ready at %s", w.AuditID, w.At.Format(time.RFC3339Nano), *t.Percent, w.Service, fmtTime(ready))})
			}
		}
	}
	return out
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339Nano)
}

// checkWithinRuns: sluice writes a Service only while a run of its
// rollout workflow is open (no write after a rollout ended), and never a
// bystander. Runs of one workflow ID never overlap, so this also says one
// rollout at a time wrote each target.
func checkWithinRuns(expects []*expect, ev evidence) []violation {
	runs := map[string][]run{}
	for _, r := range ev.Runs {
		runs[r.Service] = append(runs[r.Service], r)
	}
	var out []violation
	for _, w := range ev.Writes {
		if slices.Contains(ev.Bystanders, w.Service) {
			out = append(out, violation{"other targets untouched", w.Service, fmt.Sprintf("audit %s at %s: sluice wrote it", w.AuditID, w.At.Format(time.RFC3339Nano))})
			continue
		}
		inside := false
		for _, r := range runs[w.Service] {
			if !w.At.Before(r.Start) && (r.Close.IsZero() || !w.At.After(r.Close)) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, violation{"no write after the rollout ended", w.Service,
				fmt.Sprintf("audit %s at %s (traffic %s) falls in no run of its workflow: %s", w.AuditID, w.At.Format(time.RFC3339Nano),
					knative.FormatTraffic(w.Traffic), fmtRuns(runs[w.Service]))})
		}
	}
	return out
}

func fmtRuns(rs []run) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("[%s, %s]", r.Start.Format("15:04:05.000"), fmtTime(r.Close)))
	}
	return strings.Join(parts, " ")
}

// shares lists the candidate's share in each of sluice's traffic writes
// of its Service from its deploy on, with repeats (a retried write) and
// the zeros before its first share dropped.
func shares(e *expect, writes []write, until time.Time) []int64 {
	var out []int64
	for _, w := range writes {
		if w.Service != e.Service || !w.HasTraffic || w.At.Before(e.Deployed) || (!until.IsZero() && !w.At.Before(until)) {
			continue
		}
		p := w.share(e.Candidate)
		if (len(out) == 0 && p == 0) || (len(out) > 0 && out[len(out)-1] == p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// checkShares: no step skipped or applied out of order. The candidate's
// shares go up through its plan's steps — all of them, in order, for a
// plan nothing else moves — and, when the rollout is undone, down to 0
// once, at the end. A stale attempt writing an older step after a newer
// one would show here.
func checkShares(expects []*expect, ev evidence) []violation {
	var out []violation
	for _, e := range expects {
		if e.Ended.IsZero() {
			continue
		}
		// Up to the first write that gives a later candidate of the Service
		// a share: from then on this one is its stable, or superseded.
		var until time.Time
		for _, o := range expects {
			if o.Service != e.Service || !o.Deployed.After(e.Deployed) {
				continue
			}
			if at := firstShare(o, ev.Writes); !at.IsZero() && (until.IsZero() || at.Before(until)) {
				until = at
			}
		}
		got := shares(e, ev.Writes, until)
		if msg := sharesWrong(e, got); msg != "" {
			out = append(out, violation{"no step skipped or applied out of order", e.Candidate,
				fmt.Sprintf("plan %s, steps %v, ended %s: sluice wrote its shares %v: %s", e.Plan, e.Steps, e.Got, got, msg)})
		}
	}
	return out
}

// firstShare is when sluice first gave e's candidate a share (zero if never).
func firstShare(e *expect, writes []write) time.Time {
	for _, w := range writes {
		if w.Service != e.Service || w.At.Before(e.Deployed) {
			continue
		}
		if w.share(e.Candidate) > 0 {
			return w.At
		}
	}
	return time.Time{}
}

// share is the percent a write gives revision, over all its entries.
func (w write) share(revision string) int64 {
	var p int64
	for _, t := range w.Traffic {
		if t.RevisionName == revision && t.Percent != nil {
			p += *t.Percent
		}
	}
	return p
}

func sharesWrong(e *expect, got []int64) string {
	up := got
	undone := len(got) > 0 && got[len(got)-1] == 0
	if undone {
		up = got[:len(got)-1]
	}
	for i, p := range up {
		if !slices.Contains(e.Steps, p) {
			return fmt.Sprintf("%d%% is no step of the plan", p)
		}
		if i > 0 && p <= up[i-1] {
			return fmt.Sprintf("%d%% after %d%%", p, up[i-1])
		}
	}
	switch e.Got {
	case api.OutcomeSucceeded:
		if undone || len(up) == 0 || up[len(up)-1] != 100 {
			return "it succeeded without 100%"
		}
		if e.Exact && !slices.Equal(up, e.Steps) {
			return "a step skipped"
		}
	case api.OutcomeRolledBack, api.OutcomeAborted:
		if len(up) > 0 && !undone {
			return "it was undone, but its share was never taken back"
		}
		if e.Plan == planFail && len(up) > 0 {
			return "a failing Revision had a share"
		}
		if e.Exact && !slices.Equal(up, e.Steps[:len(up)]) {
			return "a step skipped"
		}
	}
	return ""
}

// checkProgress: each rollout's progress events, once duplicates (same id)
// are dropped, are a complete sequence that arrived in order: no number
// missing, none first received after a later one, started first, the event
// of its outcome last.
func checkProgress(expects []*expect, ev evidence) []violation {
	type pe struct {
		seq int
		typ string
	}
	by := map[string][]pe{} // in the order of first arrival
	seen := map[string]bool{}
	for _, e := range ev.Progress {
		if seen[e.ID()] {
			continue
		}
		seen[e.ID()] = true
		var d events.ProgressData
		if err := e.DataAs(&d); err != nil {
			continue
		}
		by[e.Subject()] = append(by[e.Subject()], pe{d.Sequence, strings.TrimPrefix(e.Type(), events.ProgressPrefix)})
	}
	var out []violation
	for _, e := range expects {
		if e.Ended.IsZero() {
			continue
		}
		evs := by[e.Candidate]
		var msg string
		for i := 1; i < len(evs) && msg == ""; i++ {
			if evs[i].seq < evs[i-1].seq {
				msg = fmt.Sprintf("%d arrived after %d", evs[i].seq, evs[i-1].seq)
			}
		}
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].seq < evs[j].seq })
		var types []string
		for i, x := range evs {
			types = append(types, fmt.Sprintf("%d:%s", x.seq, x.typ))
			if i > 0 && x.seq != evs[i-1].seq+1 && msg == "" {
				msg = fmt.Sprintf("%d follows %d", x.seq, evs[i-1].seq)
			}
		}
		want := strings.ToLower(string(e.Got))
		switch {
		case msg != "":
		case len(evs) == 0:
			msg = "none received"
		case evs[0].typ != "started":
			msg = "the first is not started"
		case evs[len(evs)-1].typ != want:
			msg = "the last is not " + want
		}
		if msg != "" {
			out = append(out, violation{"progress events complete", e.Candidate, fmt.Sprintf("%s: %s", msg, strings.Join(types, " "))})
		}
	}
	return out
}

// capacityEnd is when a capacity rollout's bounds stop applying: at the
// write that gave a succeeded candidate all the traffic — from then on the
// stable gets its template's bounds back, at once if a tag still routes to
// it (docs/capacity.md), as it would without sluice — or at its end.
func capacityEnd(e *expect, writes []write) time.Time {
	if e.Got != api.OutcomeSucceeded {
		return e.Ended
	}
	for _, w := range writes {
		if w.Service != e.Service || w.At.Before(e.Deployed) || w.At.After(e.Ended) {
			continue
		}
		if w.share(e.Candidate) == 100 {
			return w.At
		}
	}
	return e.Ended
}

// checkPods: a capacity rollout (availability, a surge of one pod) never
// runs more than the stable's count and its surge across both Revisions,
// and never gives the candidate a share its Ready pods cannot serve. Both
// from the API server's audit log: each Deployment's status writes, and
// sluice's traffic writes. A candidate created while sluice's admission
// webhook could not answer (failurePolicy Ignore) starts with its
// template's pods, as docs/capacity.md says; the bound then holds from the
// first moment the two Revisions are within it.
func checkPods(expects []*expect, ev evidence) []violation {
	var out []violation
	for _, e := range expects {
		if e.Plan != planCapacity || e.Ended.IsZero() {
			continue
		}
		if e.StablePods == 0 {
			out = append(out, violation{"capacity pod bounds", e.Candidate, "the rollout made no capacity plan"})
			continue
		}
		bound := e.StablePods + 1
		end := capacityEnd(e, ev.Writes)
		var times []time.Time
		for _, rev := range []string{e.Stable, e.Candidate} {
			for _, c := range ev.Pods[rev] {
				if !c.At.Before(e.Deployed) && !c.At.After(end) {
					times = append(times, c.At)
				}
			}
		}
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		// A candidate created unbounded starts with its template's pods; the
		// bound applies from the rollout's own bound taking hold, which shows
		// as the candidate's first scale-down. One never scaled down is held
		// to the bound throughout.
		over := func(t time.Time) string {
			s, c := podsAt(ev.Pods[e.Stable], t), podsAt(ev.Pods[e.Candidate], t)
			if s.Running+c.Running <= bound {
				return ""
			}
			return fmt.Sprintf("at %s %s ran %d pods and %s %d: %d, above %d pods and a surge of 1 (bounded at creation: %v)",
				t.Format(time.RFC3339Nano), e.Stable, s.Running, e.Candidate, c.Running, s.Running+c.Running, e.StablePods, ev.Bounded[e.Candidate])
		}
		within, last, found := ev.Bounded[e.Candidate], int32(0), ""
		for _, t := range times {
			c := podsAt(ev.Pods[e.Candidate], t).Running
			within = within || c < last
			last = c
			if msg := over(t); within && msg != "" {
				found = msg
				break
			}
		}
		for _, t := range times {
			if msg := over(t); !within && msg != "" {
				found = "never scaled down after its unbounded start: " + msg
				break
			}
		}
		if found != "" {
			out = append(out, violation{"capacity pod bounds", e.Candidate, found})
		}
		for _, w := range ev.Writes {
			if w.Service != e.Service || w.At.Before(e.Deployed) || w.At.After(e.Ended) {
				continue
			}
			share := w.share(e.Candidate)
			// The stage's pods are ceil(share × R / 100). Ready as the
			// Deployment's status or Knative's own count said, whichever
			// saw more: two observers of the same pods, each behind them
			// by its controllers' queues (the Deployment's by two, which a
			// restarted API server's backoff can stretch past sluice's read
			// of Knative's count and its write).
			ready := max(podsAt(ev.Pods[e.Candidate], w.At).Ready, podsAt(ev.Counted[e.Candidate], w.At).Ready)
			if need := (share*int64(e.StablePods) + 99) / 100; int64(ready) < need {
				out = append(out, violation{"capacity pod bounds", e.Candidate, fmt.Sprintf("audit %s at %s gave it %d%% on %d Ready pods of %d needed",
					w.AuditID, w.At.Format(time.RFC3339Nano), share, ready, need)})
				break
			}
		}
	}
	return out
}
