package chaos

import (
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/workflows"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func traffic(pairs ...any) []servingv1.TrafficTarget {
	var out []servingv1.TrafficTarget
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, servingv1.TrafficTarget{RevisionName: pairs[i].(string), Percent: ptr(int64(pairs[i+1].(int)))})
	}
	return out
}

func progressEvent(t *testing.T, id, candidate string, seq int, typ string) cloudevents.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("sluice")
	e.SetType(events.ProgressPrefix + typ)
	e.SetSubject(candidate)
	if err := e.SetData(cloudevents.ApplicationJSON, events.ProgressData{Candidate: candidate, Sequence: seq}); err != nil {
		t.Fatal(err)
	}
	return e
}

// good is a rollout of s-00002 through 20, 50, 100 that broke nothing.
func good(t *testing.T) ([]*expect, evidence) {
	e := &expect{Service: "s", Candidate: "s-00002", Stable: "s-00001", Plan: planSteps, Steps: []int64{20, 50, 100},
		Outcome: workflows.OutcomeSucceeded, Exact: true, Deployed: at(0), Ended: at(20), Got: workflows.OutcomeSucceeded, GotReason: "all steps passed"}
	base := servingv1.TrafficTarget{RevisionName: "s-00001", Percent: ptr(int64(0)), Tag: "base"}
	w := func(s int, tr []servingv1.TrafficTarget) write {
		return write{Service: "s", At: at(s), AuditID: "a" + at(s).Format("05"), Traffic: append(tr, base), HasTraffic: true}
	}
	ev := evidence{
		Writes: []write{
			w(5, traffic("s-00001", 80, "s-00002", 20)), w(6, traffic("s-00001", 80, "s-00002", 20)),
			w(10, traffic("s-00001", 50, "s-00002", 50)), w(15, traffic("s-00002", 100)),
			{Service: "s", At: at(16), AuditID: "ended"},
		},
		Ready:   map[string]time.Time{"s-00001": at(-60), "s-00002": at(4)},
		Runs:    []run{{Service: "s", Start: at(1), Close: at(17)}},
		Traffic: map[string][]servingv1.TrafficTarget{"s": append(traffic("s-00002", 100), base), "by": {{LatestRevision: ptr(true), Percent: ptr(int64(100))}}},
		Progress: []cloudevents.Event{
			progressEvent(t, "r-1", "s-00002", 1, "started"), progressEvent(t, "r-2", "s-00002", 2, "step"),
			progressEvent(t, "r-2", "s-00002", 2, "step"), progressEvent(t, "r-3", "s-00002", 3, "succeeded"),
		},
		Bystanders: []string{"by"},
	}
	return []*expect{e}, ev
}

func TestCheckPassesAGoodRollout(t *testing.T) {
	expects, ev := good(t)
	if v := check(expects, ev); len(v) > 0 {
		t.Fatalf("violations of a good rollout: %v", v)
	}
}

// Each invariant fails on the evidence of what it forbids.
func TestCheckFindsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		invariant string
		breakIt   func(e *expect, ev *evidence)
	}{
		{"it ended", func(e *expect, _ *evidence) { e.Ended = time.Time{} }},
		{"the outcome its plan implies", func(e *expect, _ *evidence) { e.Got = workflows.OutcomeFailed }},
		{"the reason says why", func(e *expect, _ *evidence) { e.GotReason = "" }},
		{"the final traffic is what the outcome promises", func(_ *expect, ev *evidence) {
			ev.Traffic["s"] = traffic("s-00002", 100) // the tag is gone
		}},
		{"no share to a Revision that was not Ready", func(_ *expect, ev *evidence) { ev.Ready["s-00002"] = at(5) }},
		{"no write after the rollout ended", func(_ *expect, ev *evidence) {
			ev.Writes = append(ev.Writes, write{Service: "s", At: at(18), AuditID: "late", Traffic: traffic("s-00002", 100), HasTraffic: true})
		}},
		{"other targets untouched", func(_ *expect, ev *evidence) {
			ev.Writes = append(ev.Writes, write{Service: "by", At: at(3), AuditID: "by", Traffic: traffic("by-00001", 100), HasTraffic: true})
		}},
		{"no step skipped or applied out of order", func(_ *expect, ev *evidence) {
			ev.Writes = append(ev.Writes[:2], ev.Writes[3:]...) // 50% never written
		}},
		{"no step skipped or applied out of order", func(_ *expect, ev *evidence) {
			// A stale attempt writes 20% after 50%.
			stale := ev.Writes[0]
			stale.At = at(12)
			ev.Writes = append(ev.Writes[:3], append([]write{stale}, ev.Writes[3:]...)...)
		}},
		{"progress events complete", func(_ *expect, ev *evidence) { ev.Progress = ev.Progress[1:] }},
		{"progress events complete", func(_ *expect, ev *evidence) { ev.Progress = append(ev.Progress[:1], ev.Progress[3]) }},
	} {
		expects, ev := good(t)
		tc.breakIt(expects[0], &ev)
		found := false
		for _, v := range check(expects, ev) {
			found = found || v.Invariant == tc.invariant
		}
		if !found {
			t.Errorf("%s: not found in %v", tc.invariant, check(expects, ev))
		}
	}
}

func TestSharesOfAnUndoneRollout(t *testing.T) {
	e := &expect{Plan: planAbort, Steps: []int64{30, 100}, Exact: true, Got: workflows.OutcomeAborted}
	for _, tc := range []struct {
		got  []int64
		want string
	}{
		{[]int64{30, 0}, ""},
		{nil, ""},
		{[]int64{30}, "never taken back"},
		{[]int64{40, 0}, "no step of the plan"},
	} {
		if msg := sharesWrong(e, tc.got); (tc.want == "") != (msg == "") || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: %q, want %q", tc.got, msg, tc.want)
		}
	}
	fail := &expect{Plan: planFail, Steps: []int64{50, 100}, Got: workflows.OutcomeRolledBack}
	if msg := sharesWrong(fail, []int64{50, 0}); !strings.Contains(msg, "failing Revision") {
		t.Errorf("a failing Revision with a share: %q", msg)
	}
}

// A candidate whose successor was deployed before sluice wrote its last
// step still owns the writes up to the successor's first share.
func TestSharesEndAtTheNextCandidatesFirstShare(t *testing.T) {
	c1 := &expect{Service: "s", Candidate: "s-00002", Plan: planSupersede, Steps: []int64{40, 100}, Deployed: at(0), Ended: at(9), Got: workflows.OutcomeSucceeded}
	c2 := &expect{Service: "s", Candidate: "s-00003", Plan: planSupersede, Steps: []int64{40, 100}, Deployed: at(4), Ended: at(20), Got: workflows.OutcomeSucceeded}
	writes := []write{
		{Service: "s", At: at(2), Traffic: traffic("s-00001", 60, "s-00002", 40), HasTraffic: true},
		{Service: "s", At: at(6), Traffic: traffic("s-00002", 100), HasTraffic: true},
		{Service: "s", At: at(12), Traffic: traffic("s-00002", 60, "s-00003", 40), HasTraffic: true},
		{Service: "s", At: at(15), Traffic: traffic("s-00003", 100), HasTraffic: true},
	}
	if v := checkShares([]*expect{c1, c2}, evidence{Writes: writes}); len(v) > 0 {
		t.Fatalf("violations: %v", v)
	}
}

// A later candidate that never had a share (its container crashed) does
// not end a succeeded candidate's writes; the next that had one does.
func TestSharesEndAtTheFirstLaterShare(t *testing.T) {
	c1 := &expect{Service: "s", Candidate: "s-00002", Plan: planSteps, Steps: []int64{50, 100}, Exact: true, Deployed: at(0), Ended: at(9), Got: workflows.OutcomeSucceeded}
	c2 := &expect{Service: "s", Candidate: "s-00003", Plan: planFail, Steps: []int64{50, 100}, Deployed: at(10), Ended: at(20), Got: workflows.OutcomeRolledBack}
	c3 := &expect{Service: "s", Candidate: "s-00004", Plan: planAbort, Steps: []int64{30, 100}, Exact: true, Deployed: at(21), Ended: at(40), Got: workflows.OutcomeAborted}
	writes := []write{
		{Service: "s", At: at(2), Traffic: traffic("s-00001", 50, "s-00002", 50), HasTraffic: true},
		{Service: "s", At: at(6), Traffic: traffic("s-00002", 100), HasTraffic: true},
		{Service: "s", At: at(25), Traffic: traffic("s-00002", 70, "s-00004", 30), HasTraffic: true},
		{Service: "s", At: at(30), Traffic: traffic("s-00002", 100), HasTraffic: true},
	}
	if v := checkShares([]*expect{c1, c2, c3}, evidence{Writes: writes}); len(v) > 0 {
		t.Fatalf("violations: %v", v)
	}
}
