package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/measure"
	"github.com/sluicehq/sluice/test/knativefake"
)

// analysisHarness runs a rollout of hello-00002 over steps 25,50,100 with a
// 1m hold and the given analysis document; measured and hook script what the
// check and the webhooks answer, call by call.
func analysisHarness(t *testing.T, doc string, measured func(n int, in measure.CheckInput) analysis.Measurement,
	hook func(n int, in measure.WebhookInput) analysis.Measurement) *harness {
	t.Helper()
	return withAnalysis(newHarness(t, helloObjects(map[string]string{config.AnnotationAnalysis: doc}, true)...), measured, hook)
}

// withAnalysis scripts a harness's check and webhook activities.
func withAnalysis(h *harness, measured func(n int, in measure.CheckInput) analysis.Measurement,
	hook func(n int, in measure.WebhookInput) analysis.Measurement) *harness {
	checks, hooks := 0, 0
	h.env.OnActivity(a.MeasureCheck, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in measure.CheckInput) (analysis.Measurement, error) {
			checks++
			m := measured(checks, in)
			m.Name, m.Kind, m.Step, m.Min, m.Max, m.DryRun = in.Check.Name, checkKind(in.Check), in.Step, in.Check.Min, in.Check.Max, in.Check.DryRun
			if m.Result == "" {
				m.Result = analysis.Evaluate(m.Value, in.Check.Min, in.Check.Max)
			}
			return m, nil
		})
	h.env.OnActivity(a.CallWebhook, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in measure.WebhookInput) (analysis.Measurement, error) {
			hooks++
			m := hook(hooks, in)
			if m.Result == lost {
				return analysis.Measurement{}, errors.New("worker lost")
			}
			m.Name, m.Kind, m.Moment = in.Hook.Name, analysis.KindWebhook, string(in.Hook.At)
			return m, nil
		}).Maybe()
	return h
}

// lost makes a scripted webhook activity fail as if its worker were lost.
const lost analysis.Result = "test: lost"

func value(v float64) analysis.Measurement { return analysis.Measurement{Value: &v} }

// badAt measures a healthy 0.999 but at the k-th measurement, bad.
func badAt(k int, bad float64) func(int, measure.CheckInput) analysis.Measurement {
	return func(n int, _ measure.CheckInput) analysis.Measurement {
		if n == k {
			return value(bad)
		}
		return value(0.999)
	}
}

func ok200(int, measure.WebhookInput) analysis.Measurement {
	return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
}

const successDoc = `
prometheus: http://prometheus:9090
interval: 20s
checks:
  - name: success-rate
    builtin: success-rate
`

func TestAnalysisPromotesAGoodCandidate(t *testing.T) {
	var seen []measure.CheckInput
	h := analysisHarness(t, successDoc, func(n int, in measure.CheckInput) analysis.Measurement {
		seen = append(seen, in)
		return value(0.999)
	}, ok200)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	st := h.status()
	// Two steps hold 1m: rounds at 20s and 40s, and the closing one at 60s.
	if st.Analysis.Rounds != 6 || st.Analysis.Tallies[0].Passed != 6 || st.Analysis.FinalStep != 2 {
		t.Fatalf("analysis = %+v", st.Analysis)
	}
	if in := seen[0]; in.Vars.Namespace != ns || in.Vars.Candidate != "hello-00002" || in.Vars.Stable != "hello-00001" ||
		in.Vars.Service != "hello" || in.Vars.Weight != 25 || in.Step != 1 || in.Prometheus != "http://prometheus:9090" {
		t.Fatalf("first check input = %+v", in)
	}
	if in := seen[5]; in.Vars.Weight != 50 || in.Step != 2 {
		t.Fatalf("last check input = %+v", in)
	}
}

func TestAnalysisFailureRollsBackAtFirstStep(t *testing.T) {
	h := analysisHarness(t, successDoc, badAt(2, 0.8), ok200)
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "analysis: success-rate failed once (failure limit 0); last: success-rate = 0.8 Failed (range [0.99, ∞])") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	wantTraffic(t, h.traffic("hello"),
		knativefake.Target("hello-00001", 90, ""), knativefake.Target("hello-00000", 10, "legacy"), knativefake.Target("hello-00001", 0, "current"))
	st := h.status()
	if st.StepNumber != 1 || st.Analysis.Rounds != 2 || len(st.Analysis.Recent) != 2 || st.Analysis.Recent[1].Result != analysis.Failed {
		t.Fatalf("status = step %d %+v", st.StepNumber, st.Analysis)
	}
}

func TestAnalysisFailureLimitTolerates(t *testing.T) {
	doc := successDoc + "    failureLimit: 1\n"
	h := analysisHarness(t, doc, func(n int, _ measure.CheckInput) analysis.Measurement {
		if n == 2 {
			return value(0.5)
		}
		return value(1)
	}, ok200)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if tl := h.status().Analysis.Tallies[0]; tl.Failures != 1 || tl.Passed != 5 {
		t.Fatalf("tally = %+v", tl)
	}
}

func TestAnalysisToleratesARoundWithoutData(t *testing.T) {
	// The first round of each step has no data yet (by default one such
	// round in a row is tolerated).
	h := analysisHarness(t, successDoc, func(n int, _ measure.CheckInput) analysis.Measurement {
		if n == 1 || n == 4 {
			return analysis.Measurement{Message: "no data: sum(...)"}
		}
		return value(1)
	}, ok200)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if tl := h.status().Analysis.Tallies[0]; tl.Inconclusives != 2 || tl.ConsecutiveInconclusives != 0 || tl.Passed != 4 {
		t.Fatalf("tally = %+v", tl)
	}
}

func TestAnalysisErrorsPauseUntilResumed(t *testing.T) {
	doc := successDoc + "    consecutiveErrorLimit: 2\n"
	h := analysisHarness(t, doc, func(n int, _ measure.CheckInput) analysis.Measurement {
		if n <= 3 {
			return analysis.Measurement{Result: analysis.Error, Message: "query Prometheus at http://prometheus:9090: connection refused"}
		}
		return value(1)
	}, ok200)
	var paused api.Status
	// Rounds at 20s and 40s err; the closing round at 60s errs a third time.
	h.at(90*time.Second, func() { paused = h.status() })
	h.at(2*time.Minute, func() { h.update(api.CommandResume, api.Command{By: "oncall", Reason: "prometheus fixed"}) })
	h.run("hello-00002")
	if !paused.Paused || paused.Phase == api.PhaseRollingBack || paused.Weight != 25 ||
		!strings.Contains(paused.PauseReason, "success-rate could not be measured 3 times in a row (consecutive error limit 2): query Prometheus at http://prometheus:9090: connection refused") {
		t.Fatalf("at 90s: paused=%v phase %s weight %d reason %q", paused.Paused, paused.Phase, paused.Weight, paused.PauseReason)
	}
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	st := h.status()
	// Resuming accepted the closing round that paused: step 2 ran 3 rounds.
	if tl := st.Analysis.Tallies[0]; tl.Errors != 3 || tl.ConsecutiveErrors != 0 || tl.Passed != 3 || st.Analysis.Rounds != 6 {
		t.Fatalf("tally = %+v rounds %d", tl, st.Analysis.Rounds)
	}
}

func TestAnalysisNoDataPauses(t *testing.T) {
	h := analysisHarness(t, successDoc+"    inconclusiveLimit: 0\n", func(int, measure.CheckInput) analysis.Measurement {
		return analysis.Measurement{Message: "no data: sum(...)"}
	}, ok200)
	var st api.Status
	h.at(30*time.Second, func() {
		st = h.status()
		h.update(api.CommandAbort, api.Command{By: "oncall", Reason: "no traffic to judge"})
	})
	h.run("hello-00002")
	if !st.Paused || !strings.Contains(st.PauseReason, "success-rate had no data (inconclusive limit 0): no data") {
		t.Fatalf("paused=%v reason %q", st.Paused, st.PauseReason)
	}
	if res := h.result(); res.Outcome != api.OutcomeAborted {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
}

const hooksDoc = `
interval: 20s
webhooks:
  - name: approve
    at: gate
    url: http://approvals/
  - name: smoke
    at: hold
    url: http://smoke/
  - name: ready-check
    at: before-start
    url: http://before/
  - name: notify
    at: after-end
    url: http://notify/
  - name: undo
    at: rollback
    url: http://undo/
`

func TestGateWebhookHoldsPromotionUntil2xx(t *testing.T) {
	gateCalls := 0
	var payloads []measure.WebhookInput
	h := analysisHarness(t, hooksDoc, nil, func(n int, in measure.WebhookInput) analysis.Measurement {
		payloads = append(payloads, in)
		if in.Hook.At == config.MomentGate {
			gateCalls++
			if gateCalls < 4 {
				return analysis.Measurement{Result: analysis.Failed, StatusCode: 409, Message: "HTTP 409: not yet"}
			}
		}
		return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
	})
	var atGate api.Status
	// Holds end at 1m and 2m; the gate is asked at 2m, 2m20s, 2m40s, 3m.
	h.at(2*time.Minute+50*time.Second, func() { atGate = h.status() })
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if atGate.Phase != api.PhaseGate || atGate.Weight != 50 {
		t.Fatalf("at 2m50s: phase %s weight %d", atGate.Phase, atGate.Weight)
	}
	if gateCalls != 4 {
		t.Fatalf("gate asked %d times, want 4", gateCalls)
	}
	moments := map[string]int{}
	for _, p := range payloads {
		moments[string(p.Hook.At)]++
	}
	// smoke: 3 rounds in each of 2 holds.
	if moments["before-start"] != 1 || moments["hold"] != 6 || moments["after-end"] != 1 || moments["rollback"] != 0 {
		t.Fatalf("calls by moment = %v", moments)
	}
	first := payloads[0]
	if first.Payload.Moment != "before-start" || first.Payload.Rollout.Candidate != "hello-00002" || first.Payload.Rollout.Weight != 0 || first.Payload.ID == "" {
		t.Fatalf("first payload = %+v", first.Payload)
	}
	last := payloads[len(payloads)-1].Payload
	if last.Moment != "after-end" || last.Rollout.Outcome != string(api.OutcomeSucceeded) || last.Rollout.Weight != 100 {
		t.Fatalf("last payload = %+v", last)
	}
}

func TestPromoteConfirmsInPlaceOfAGateWebhook(t *testing.T) {
	h := analysisHarness(t, hooksDoc, nil, func(n int, in measure.WebhookInput) analysis.Measurement {
		if in.Hook.At == config.MomentGate {
			return analysis.Measurement{Result: analysis.Failed, StatusCode: 503, Message: "HTTP 503: approvals down"}
		}
		return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
	})
	var promoted *updateResult
	h.at(5*time.Minute, func() {
		promoted = h.update(api.CommandPromote, api.Command{By: "oncall", Reason: "approved by phone"})
	})
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if promoted == nil || !promoted.accepted {
		t.Fatalf("promote at the webhook gate: %+v", promoted)
	}
	st := h.status()
	if !st.Analysis.GatePassed || st.EndedAt.Sub(st.StartedAt) < 5*time.Minute {
		t.Fatalf("gate passed %v, ended after %s", st.Analysis.GatePassed, st.EndedAt.Sub(st.StartedAt))
	}
}

func TestHoldWebhookFailureRollsBack(t *testing.T) {
	var moments []string
	h := analysisHarness(t, hooksDoc, nil, func(n int, in measure.WebhookInput) analysis.Measurement {
		moments = append(moments, string(in.Hook.At))
		if in.Hook.At == config.MomentHold {
			return analysis.Measurement{Result: analysis.Failed, StatusCode: 500, Message: "HTTP 500: smoke test failed"}
		}
		return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "analysis: smoke failed once (failure limit 0); last: webhook smoke: HTTP 500 Failed") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if got := strings.Join(moments, ","); got != "before-start,hold,rollback,after-end" {
		t.Fatalf("calls = %s", got)
	}
}

// A hold webhook whose activity fails on every attempt counts as a failed
// call, like a webhook that does not answer: the rollout rolls back.
func TestLostHoldWebhookCountsAsFailed(t *testing.T) {
	h := analysisHarness(t, hooksDoc, nil, func(n int, in measure.WebhookInput) analysis.Measurement {
		if in.Hook.At == config.MomentHold {
			return analysis.Measurement{Result: lost}
		}
		return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "analysis: smoke failed once (failure limit 0)") || !strings.Contains(res.Reason, "worker lost") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	m := h.status().Analysis.Tallies[0].Last
	if m.Kind != analysis.KindWebhook || m.Moment != "hold" || m.Step != 1 || m.Weight != 25 {
		t.Fatalf("measurement of the lost call: %+v", m)
	}
}

func TestBeforeStartWebhookFailureRollsBack(t *testing.T) {
	h := analysisHarness(t, hooksDoc, nil, func(n int, in measure.WebhookInput) analysis.Measurement {
		if in.Hook.At == config.MomentBeforeStart {
			return analysis.Measurement{Result: analysis.Failed, Message: "call http://before/: connection refused"}
		}
		return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "before-start webhook ready-check: Failed: call http://before/: connection refused") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if st := h.status(); st.Steps[0].StartedAt.IsZero() == false {
		t.Fatal("the candidate got traffic before the before-start hook passed")
	}
}
