package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/test/requestsim"
	"github.com/sluicehq/sluice/workflows"
)

// comparisons judge the candidate against the stable over the same 24 s,
// a sample every 3 s (Prometheus scrapes every second); and a fixed threshold on the mean latency, as a dry
// run: measured and shown, never acted on.
const comparisons = `
interval: 4s
checks:
  - name: latency
    builtin: latency-mean
    window: 24s
    compare: {step: 3s, minSamples: 6}
  - name: errors
    builtin: success-rate
    window: 24s
    compare: {step: 3s, minSamples: 6}
  - name: latency-threshold
    builtin: latency-mean
    max: 120
    window: 10s
    dryRun: true
`

func compared(extra map[string]string) map[string]string {
	ann := map[string]string{"sluice.dev/steps": "30,100", "sluice.dev/hold": "30s", "sluice.dev/analysis": comparisons}
	for k, v := range extra {
		ann[k] = v
	}
	return ann
}

func latency(d string) map[string]string { return map[string]string{requestsim.AnnotationLatency: d} }

// A candidate 30% slower than the stable, though both are well under any
// fixed threshold a team would set (and under the dry run's 120 ms), is
// rolled back by the comparison.
func TestComparisonRollsBackSlowerCandidate(t *testing.T) {
	c := ctl(t)
	firstRolloutOf(t, c, "cmp1", compared(nil), latency("60ms"))
	deploy(t, "cmp1", "example.com/cmp1:v2", nil, latency("78ms"))
	st := waitOutcome(t, c, svcTarget("cmp1"), "cmp1-00002", 2*time.Minute)
	if st.Outcome != workflows.OutcomeRolledBack || !strings.Contains(st.Reason, "the comparison score failed") || !strings.Contains(st.Reason, "failed: latency") {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "cmp1"); got != "cmp1-00001=100%" {
		t.Fatalf("traffic after rollback: %s", got)
	}
	var failed *analysis.Measurement
	for _, m := range historyMeasurements(t, c.Temporal, workflows.WorkflowID(svcTarget("cmp1"))) {
		if m.Name == "latency" && m.Result == analysis.Failed {
			failed = &m
		}
		if m.Name == "latency-threshold" && m.Result == analysis.Failed {
			t.Fatalf("the fixed threshold failed: the candidate was meant to stay under it: %s", m.Summary())
		}
	}
	if failed == nil || failed.Compare == nil {
		t.Fatal("no failed latency comparison in the history")
	}
	cmp := failed.Compare
	// The user containers answer in 60 and 78 ms; the queue-proxy adds a
	// little to both.
	if cmp.Stable.Median < 60 || cmp.Stable.Median > 90 || cmp.Candidate.Median < 78 || cmp.Candidate.Median > 110 || cmp.Shift < 12 || cmp.Low == nil || *cmp.Low <= cmp.Allowed {
		t.Fatalf("comparison: %s", failed.Summary())
	}
	t.Logf("measured on real queue-proxies: %s", failed.Summary())
	out, err := sluice(t, "status", "cmp1")
	if err != nil || !strings.Contains(out, "Comparisons, candidate against stable") || !strings.Contains(out, "Score: score") || !strings.Contains(out, "latency-threshold (dry run)") {
		t.Fatalf("sluice status: %v\n%s", err, out)
	}
	t.Logf("sluice status cmp1:\n%s", out)
}

// A dependency that makes every Revision slow (both answer in 130 ms, over
// the dry run's fixed 120 ms) does not roll back a candidate that is no
// worse than the stable: the comparison passes, and the fixed threshold,
// which fails, only says so.
func TestComparisonPassesWhenBothAreSlow(t *testing.T) {
	c := ctl(t)
	firstRolloutOf(t, c, "cmp2", compared(nil), latency("130ms"))
	deploy(t, "cmp2", "example.com/cmp2:v2", nil, latency("130ms"))
	st := waitOutcome(t, c, svcTarget("cmp2"), "cmp2-00002", 2*time.Minute)
	if st.Outcome != workflows.OutcomeSucceeded || serviceTraffic(t, "cmp2") != "cmp2-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "cmp2"))
	}
	var passed, thresholdFailed int
	for _, m := range historyMeasurements(t, c.Temporal, workflows.WorkflowID(svcTarget("cmp2"))) {
		switch {
		case m.Name == "latency" && m.Result == analysis.Passed:
			passed++
		case m.Name == "latency-threshold" && m.Result == analysis.Failed && m.DryRun:
			thresholdFailed++
		case m.Name == "score" && (m.Result == analysis.Failed || m.Result == analysis.Marginal):
			t.Fatalf("a round scored %s", m.Summary())
		}
	}
	if passed == 0 || thresholdFailed == 0 {
		t.Fatalf("latency comparisons passed %d times, the dry-run threshold failed %d times", passed, thresholdFailed)
	}
	score := st.Analysis.Tallies[len(st.Analysis.Tallies)-1]
	if score.Kind != analysis.KindScore || score.Last == nil || score.Last.Result != analysis.Passed {
		t.Fatalf("score tally %+v", score)
	}
}

// With too little traffic to sample (a tenth of a request a second), the
// comparisons have no verdict by the end of the step: the rollout pauses
// for a person instead of guessing.
func TestComparisonWithTooLittleTrafficPauses(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "cmp3", compared(map[string]string{requestsim.AnnotationRate: "0.1"}))
	deploy(t, "cmp3", "example.com/cmp3:v2", nil, nil)
	st := waitStatus(t, c, svcTarget("cmp3"), 2*time.Minute, "the pause without a verdict", func(s workflows.Status) bool {
		return s.Candidate == "cmp3-00002" && (s.Paused || s.Phase.Done())
	})
	if !st.Paused || st.Weight != 30 || !strings.Contains(st.PauseReason, "could not judge the candidate by the end of the step") || !strings.Contains(st.PauseReason, "too few samples") && !strings.Contains(st.PauseReason, "no verdict") {
		t.Fatalf("paused=%v weight %d phase %s: %s", st.Paused, st.Weight, st.Phase, st.PauseReason)
	}
	if out, err := sluice(t, "abort", "cmp3", "--reason", "too little traffic to judge"); err != nil {
		t.Fatalf("abort: %v\n%s", err, out)
	}
	if st := waitOutcome(t, c, svcTarget("cmp3"), "cmp3-00002", time.Minute); st.Outcome != workflows.OutcomeAborted || serviceTraffic(t, "cmp3") != "cmp3-00001=100%" {
		t.Fatalf("outcome %s, traffic %s", st.Outcome, serviceTraffic(t, "cmp3"))
	}
}
