package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/measure"
	"github.com/sluicehq/sluice/test/knativefake"
)

// compareDoc has two comparisons and a dry-run one; rounds every 20s over
// the harness's 1m holds.
const compareDoc = `
prometheus: http://prometheus:9090
interval: 20s
checks:
  - name: latency
    builtin: latency-mean
    compare: true
  - name: errors
    builtin: success-rate
    compare: true
  - name: p99
    builtin: latency-p99
    compare: true
    dryRun: true
`

// verdicts scripts each comparison by name; a name missing passes.
func verdicts(script func(n int, name string) analysis.Result) func(int, measure.CheckInput) analysis.Measurement {
	calls := map[string]int{}
	return func(_ int, in measure.CheckInput) analysis.Measurement {
		calls[in.Check.Name]++
		r := script(calls[in.Check.Name], in.Check.Name)
		if r == "" {
			r = analysis.Passed
		}
		return analysis.Measurement{Result: r, Message: in.Check.Name + " " + string(r)}
	}
}

func TestComparisonsPromoteACandidateLikeTheStable(t *testing.T) {
	var seen []measure.CheckInput
	h := analysisHarness(t, compareDoc, func(n int, in measure.CheckInput) analysis.Measurement {
		seen = append(seen, in)
		// The dry-run comparison fails every round: it must not act.
		if in.Check.Name == "p99" {
			return analysis.Measurement{Result: analysis.Failed, Message: "p99 is worse"}
		}
		return analysis.Measurement{Result: analysis.Passed}
	}, ok200)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	st := h.status()
	tallies := st.Analysis.Tallies
	if len(tallies) != 4 || tallies[3].Kind != analysis.KindScore || tallies[3].Passed != 6 || !tallies[2].DryRun || tallies[2].Failures != 6 {
		t.Fatalf("tallies = %+v", tallies)
	}
	if last := st.Analysis.Recent[len(st.Analysis.Recent)-1]; last.Kind != analysis.KindScore || last.Value == nil || *last.Value != 100 || last.Step != 2 {
		t.Fatalf("last measurement = %+v", last)
	}
	if in := seen[0]; in.Check.Compare == nil || in.Vars.Stable != "hello-00001" || in.Vars.Candidate != "hello-00002" {
		t.Fatalf("comparison input = %+v", in)
	}
}

func TestComparisonFailureRollsBack(t *testing.T) {
	h := analysisHarness(t, compareDoc, verdicts(func(n int, name string) analysis.Result {
		if name == "latency" && n == 2 {
			return analysis.Failed
		}
		return ""
	}), ok200)
	h.run("hello-00002")
	res := h.result()
	// One of two comparisons failing scores 50, below the marginal band.
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "analysis: the comparison score failed: score 50 Failed (pass ≥ 95, marginal ≥ 75): failed: latency") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	wantTraffic(t, h.traffic("hello"),
		knativefake.Target("hello-00001", 90, ""), knativefake.Target("hello-00000", 10, "legacy"), knativefake.Target("hello-00001", 0, "current"))
}

func TestMarginalScorePausesForAPerson(t *testing.T) {
	doc := compareDoc + `  - name: cpu
    query: 'avg(cpu{rev="{{.Revision}}"})'
    compare: {direction: increase}
    weight: 4
score: {pass: 90, marginal: 60}
`
	h := analysisHarness(t, doc, verdicts(func(n int, name string) analysis.Result {
		if name == "errors" && n == 1 {
			return analysis.Failed // 5 of 6 weight passes: 83, marginal
		}
		return ""
	}), ok200)
	var paused api.Status
	h.at(30*time.Second, func() { paused = h.status() })
	h.at(time.Minute, func() { h.update(api.CommandResume, api.Command{By: "oncall", Reason: "errors were a blip"}) })
	h.run("hello-00002")
	if !paused.Paused || paused.Weight != 25 || !strings.Contains(paused.PauseReason, "the comparison score is marginal: score 83.33 Marginal (pass ≥ 90, marginal ≥ 60): failed: errors") {
		t.Fatalf("at 30s: paused=%v weight %d reason %q", paused.Paused, paused.Weight, paused.PauseReason)
	}
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
}

func TestComparisonsWithoutDataPauseAtTheStepsEnd(t *testing.T) {
	h := analysisHarness(t, compareDoc, verdicts(func(n int, name string) analysis.Result {
		if name == "errors" && n <= 3 {
			return analysis.Inconclusive // too few samples all through step 1
		}
		return ""
	}), ok200)
	var mid, end api.Status
	h.at(50*time.Second, func() { mid = h.status() })
	h.at(80*time.Second, func() {
		end = h.status()
		h.update(api.CommandAbort, api.Command{By: "oncall", Reason: "too little traffic"})
	})
	h.run("hello-00002")
	if mid.Paused || mid.Analysis.Rounds != 2 {
		t.Fatalf("rounds without a verdict mid-hold paused: %+v", mid.Analysis)
	}
	if !end.Paused || !strings.Contains(end.PauseReason, "could not judge the candidate by the end of the step: 1 of 2 comparisons had no verdict (errors)") {
		t.Fatalf("at the step's end: paused=%v reason %q", end.Paused, end.PauseReason)
	}
	if res := h.result(); res.Outcome != api.OutcomeAborted {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
}
