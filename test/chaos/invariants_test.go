package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func traffic(pairs ...any) []servingv1.TrafficTarget {
	var out []servingv1.TrafficTarget
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, servingv1.TrafficTarget{RevisionName: pairs[i].(string), Percent: new(int64(pairs[i+1].(int)))})
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
		Outcome: api.OutcomeSucceeded, Exact: true, Deployed: at(0), Ended: at(20), Got: api.OutcomeSucceeded, GotReason: "all steps passed"}
	base := servingv1.TrafficTarget{RevisionName: "s-00001", Percent: new(int64(0)), Tag: "base"}
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
		Traffic: map[string][]servingv1.TrafficTarget{"s": append(traffic("s-00002", 100), base), "by": {{LatestRevision: new(true), Percent: new(int64(100))}}},
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
		{"the outcome its plan implies", func(e *expect, _ *evidence) { e.Got = api.OutcomeFailed }},
		{"the reason says why", func(e *expect, _ *evidence) { e.GotReason = "" }},
		{"the reason says why", func(e *expect, _ *evidence) { e.ReasonHas = "analysis: success-rate failed" }},
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
		{"progress events complete", func(_ *expect, ev *evidence) {
			// All there, but the step first received after the end.
			p := ev.Progress
			ev.Progress = []cloudevents.Event{p[0], p[3], p[1]}
		}},
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
	e := &expect{Plan: planAbort, Steps: []int64{30, 100}, Exact: true, Got: api.OutcomeAborted}
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
	fail := &expect{Plan: planFail, Steps: []int64{50, 100}, Got: api.OutcomeRolledBack}
	if msg := sharesWrong(fail, []int64{50, 0}); !strings.Contains(msg, "failing Revision") {
		t.Errorf("a failing Revision with a share: %q", msg)
	}
}

// A candidate whose successor was deployed before sluice wrote its last
// step still owns the writes up to the successor's first share.
func TestSharesEndAtTheNextCandidatesFirstShare(t *testing.T) {
	c1 := &expect{Service: "s", Candidate: "s-00002", Plan: planSupersede, Steps: []int64{40, 100}, Deployed: at(0), Ended: at(9), Got: api.OutcomeSucceeded}
	c2 := &expect{Service: "s", Candidate: "s-00003", Plan: planSupersede, Steps: []int64{40, 100}, Deployed: at(4), Ended: at(20), Got: api.OutcomeSucceeded}
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
	c1 := &expect{Service: "s", Candidate: "s-00002", Plan: planSteps, Steps: []int64{50, 100}, Exact: true, Deployed: at(0), Ended: at(9), Got: api.OutcomeSucceeded}
	c2 := &expect{Service: "s", Candidate: "s-00003", Plan: planFail, Steps: []int64{50, 100}, Deployed: at(10), Ended: at(20), Got: api.OutcomeRolledBack}
	c3 := &expect{Service: "s", Candidate: "s-00004", Plan: planAbort, Steps: []int64{30, 100}, Exact: true, Deployed: at(21), Ended: at(40), Got: api.OutcomeAborted}
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

// capacityRollout is a capacity rollout from 2 pods with a surge of 1 that
// stayed within its bounds: the candidate bounded at creation to 1 pod,
// 50% on its Ready pod, the stable down to 1, the candidate up to 2, 100%.
func capacityRollout() (*expect, evidence) {
	e := &expect{Service: "s", Candidate: "s-00002", Stable: "s-00001", Plan: planCapacity, Steps: []int64{50, 100},
		Deployed: at(0), Ended: at(30), Got: api.OutcomeSucceeded, StablePods: 2}
	ev := evidence{
		Pods: map[string][]podCount{
			"s-00001": {{at(-60), 2, 2}, {at(12), 1, 1}, {at(28), 0, 0}},
			"s-00002": {{at(1), 1, 0}, {at(3), 1, 1}, {at(14), 2, 1}, {at(16), 2, 2}},
		},
		Bounded: map[string]bool{"s-00002": true},
		Writes: []write{
			{Service: "s", At: at(5), Traffic: traffic("s-00001", 50, "s-00002", 50), HasTraffic: true},
			{Service: "s", At: at(20), Traffic: traffic("s-00002", 100), HasTraffic: true},
		},
	}
	return e, ev
}

func TestCheckPodsOfACapacityRollout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(e *expect, ev *evidence)
		want    string
	}{
		{"within its bounds", func(*expect, *evidence) {}, ""},
		{"a surge of two", func(_ *expect, ev *evidence) {
			ev.Pods["s-00002"] = append(ev.Pods["s-00002"][:2], podCount{at(8), 2, 1}, podCount{at(16), 2, 2})
		}, "above 2 pods and a surge of 1"},
		{"a share before its pods", func(_ *expect, ev *evidence) { ev.Pods["s-00002"][1].Ready = 0 }, "50% on 0 Ready pods of 1 needed"},
		// Created while the webhook could not answer: its template's 2 pods
		// at first, then bounded.
		{"unbounded at creation", func(_ *expect, ev *evidence) {
			ev.Bounded["s-00002"] = false
			ev.Pods["s-00002"] = append([]podCount{{at(1), 2, 0}, {at(2), 1, 0}}, ev.Pods["s-00002"][1:]...)
		}, ""},
		// Knative makes its first pod, then its template's second, before
		// the rollout bounds it back to one: within the bound for a moment
		// on the way up, which does not end the excuse.
		{"unbounded, up to its template's pods, then bounded", func(_ *expect, ev *evidence) {
			ev.Bounded["s-00002"] = false
			ev.Pods["s-00002"] = append([]podCount{{at(1), 1, 0}, {at(2), 2, 1}, {at(3), 1, 1}}, ev.Pods["s-00002"][2:]...)
		}, ""},
		{"unbounded and never brought down", func(_ *expect, ev *evidence) {
			ev.Bounded["s-00002"] = false
			ev.Pods["s-00002"] = []podCount{{at(1), 1, 0}, {at(2), 2, 2}}
		}, "never scaled down"},
		{"above its bounds after them", func(_ *expect, ev *evidence) {
			ev.Bounded["s-00002"] = false
			ev.Pods["s-00001"] = append(ev.Pods["s-00001"][:2], podCount{at(18), 2, 2})
		}, "above 2 pods"},
		{"no plan", func(e *expect, _ *evidence) { e.StablePods = 0 }, "no capacity plan"},
		// The Deployment's status is behind the pods (its controllers'
		// queues after an API server restart); Knative counted both Ready
		// pods before the write, as sluice read them.
		{"a Deployment's status behind Knative's count", func(_ *expect, ev *evidence) {
			ev.Pods["s-00002"][3].At = at(22)
			ev.Counted = map[string][]podCount{"s-00002": {{At: at(3), Ready: 1}, {At: at(17), Ready: 2}}}
		}, ""},
		{"100% before either saw the second pod", func(_ *expect, ev *evidence) {
			ev.Pods["s-00002"][3].At = at(22)
			ev.Counted = map[string][]podCount{"s-00002": {{At: at(3), Ready: 1}, {At: at(21), Ready: 2}}}
		}, "100% on 1 Ready pods of 2 needed"},
		// A tag still routes to the stable: it gets its template's 2 pods
		// back once the candidate has all the traffic.
		{"a tagged stable after 100%", func(_ *expect, ev *evidence) {
			ev.Pods["s-00001"] = append(ev.Pods["s-00001"][:2], podCount{at(21), 2, 2})
		}, ""},
		{"a tagged stable before 100%", func(_ *expect, ev *evidence) {
			ev.Pods["s-00001"] = append(ev.Pods["s-00001"][:2], podCount{at(19), 2, 2})
		}, "above 2 pods"},
	} {
		e, ev := capacityRollout()
		tc.breakIt(e, &ev)
		v := checkPods([]*expect{e}, ev)
		switch {
		case tc.want == "" && len(v) > 0:
			t.Errorf("%s: %v", tc.name, v)
		case tc.want != "" && (len(v) != 1 || !strings.Contains(v[0].Evidence, tc.want)):
			t.Errorf("%s: %v, want one saying %q", tc.name, v, tc.want)
		}
	}
}

// A write the API server answered 504 may have been committed: it counts
// as written. One refused outright does not.
func TestReadAuditKeepsTimedOutWrites(t *testing.T) {
	line := func(code int, pct int) string {
		return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"a%d","stage":"ResponseComplete","verb":"patch",`+
			`"user":{"username":%q},"objectRef":{"resource":"services","namespace":"default","name":"s"},"responseStatus":{"code":%d},`+
			`"requestObject":{"spec":{"traffic":[{"revisionName":"s-00002","percent":%d}]}},"requestReceivedTimestamp":"2026-12-04T12:00:0%d.000000Z","stageTimestamp":"2026-12-04T12:00:0%d.000000Z"}`,
			code, workerUser, code, pct, pct/50, pct/50)
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(line(504, 100)+"\n"+line(500, 50)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := readAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Writes) != 1 || knative.FormatTraffic(a.Writes[0].Traffic) != "s-00002=100%" {
		t.Fatalf("writes %+v", a.Writes)
	}
}
