package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/capacity"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

func TestHelpListsVerbs(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"worker", "start", "status", "promote", "pause", "resume", "abort", "setup", "report"} {
		if !strings.Contains(out.String(), "\n  "+verb+" ") {
			t.Errorf("sluice --help does not list %q:\n%s", verb, out.String())
		}
	}
}

func TestAbortRequiresReason(t *testing.T) {
	root := newRootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"abort", "hello"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), `"reason" not set`) {
		t.Fatalf("abort without --reason: %v", err)
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{&control.RejectedError{Reason: "no"}, exitRejected},
		{fmt.Errorf("x: %w", control.ErrNoRollout), exitNotFound},
		{errors.New("boom"), exitError},
		{&outcomeError{outcome: api.OutcomeRolledBack}, exitRolledBack},
		{&outcomeError{outcome: api.OutcomeAborted}, exitAborted},
		{fmt.Errorf("x: %w", errWatchTimeout), exitTimeout},
	} {
		if got := exitCode(tc.err, io.Discard); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for arg, want := range map[string]string{
		"hello":             "shop/service/hello",
		"service/hello":     "shop/service/hello",
		"ksvc/hello":        "shop/service/hello",
		"configuration/api": "shop/configuration/api",
	} {
		got, err := control.ParseTarget("shop", arg)
		if err != nil || got.String() != want {
			t.Errorf("ParseTarget(%q) = %v, %v; want %s", arg, got, err, want)
		}
	}
	for _, bad := range []string{"deployment/x", "service/", ""} {
		if _, err := control.ParseTarget("shop", bad); err == nil {
			t.Errorf("ParseTarget(%q) succeeded", bad)
		}
	}
}

func TestRenderStatus(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	p := func(n int64) *int64 { return &n }
	st := api.Status{
		Target:    knative.TargetRef{Namespace: "default", Kind: knative.KindService, Name: "hello"},
		Phase:     api.PhaseHolding,
		Candidate: "hello-00002", CandidateReady: true, Stable: "hello-00001", Weight: 25,
		Live: []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: p(75)}, {RevisionName: "hello-00002", Percent: p(25)}},
		Steps: []api.StepStatus{
			{Weight: 25, Hold: api.Duration(time.Minute), StartedAt: at},
			{Weight: 100, Gate: true},
		},
		ReadyDeadline: at.Add(10 * time.Minute), Deadline: at.Add(2 * time.Hour),
		Commands: []api.CommandRecord{
			{Name: "start", By: "ci", At: at, Via: "start"},
			{Name: "resume", By: "ann", At: at.Add(time.Second), Via: "signal", Rejected: "resume rejected: the rollout is not paused"},
		},
		Shown: api.PhaseHolding, StepNumber: 1, StepCount: 2, HoldLeftAt: api.Duration(42 * time.Second),
		Preview: &api.Preview{Tag: "preview", URL: "http://preview-hello.default.example.com", Header: "Knative-Serving-Tag: preview"},
	}
	var out bytes.Buffer
	renderStatus(&out, st)
	want := `Rollout:    default/service/hello  (workflow rollout/default/service/hello)
Phase:      Holding — step 1 of 2, candidate at 25%
Revisions:  hello-00001 (stable) -> hello-00002 (candidate, Ready)
Preview:    http://preview-hello.default.example.com, or any of the target's URLs with Knative-Serving-Tag: preview
Traffic:    hello-00001=75%, hello-00002=25%
Hold:       42s left
Deadlines:  Ready by 2026-11-29 10:10:00Z, 100% by 2026-11-29 12:00:00Z

Steps:
  #  WEIGHT  HOLD  GATE    STATE    STARTED               ENDED
  1  25%     1m0s  -       holding  2026-11-29 10:00:00Z  -  <- now
  2  100%    0s    manual  pending  -                     -

Commands:
  2026-11-29 10:00:00Z  start   by ci   via start
  2026-11-29 10:00:01Z  resume  by ann  via signal  (rejected: resume rejected: the rollout is not paused)
`
	if out.String() != want {
		t.Fatalf("status output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestRenderList(t *testing.T) {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rs := []control.Summary{
		{Target: "default/service/hello", Candidate: "hello-00003", Stable: "hello-00002", Phase: "Holding", Step: 2, Weight: 50, Status: "RUNNING", StartedAt: start.Add(time.Hour)},
		{Target: "default/service/hello", Candidate: "hello-00002", Stable: "hello-00001", Phase: "Succeeded", Outcome: "Succeeded", Step: 3, Weight: 100, Status: "COMPLETED", StartedAt: start, ClosedAt: start.Add(7 * time.Minute)},
	}
	var out bytes.Buffer
	renderList(&out, rs, start.Add(time.Hour+90*time.Second))
	want := `TARGET                 CANDIDATE    STABLE       PHASE      STEP  WEIGHT  STARTED               DURATION
default/service/hello  hello-00003  hello-00002  Holding    2     50%     2026-11-29 11:00:00Z  1m30s
default/service/hello  hello-00002  hello-00001  Succeeded  3     100%    2026-11-29 10:00:00Z  7m0s
`
	if out.String() != want {
		t.Fatalf("list output:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	renderList(&out, nil, start)
	if out.String() != "No rollouts found.\n" {
		t.Fatalf("empty list: %q", out.String())
	}
}

func TestWatchLine(t *testing.T) {
	p := func(n int64) *int64 { return &n }
	st := api.Status{
		Candidate: "hello-00002", Phase: api.PhaseHolding, Weight: 25, Paused: true, PauseReason: "paused by ann: look",
		Live:  []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: p(75)}, {RevisionName: "hello-00002", Percent: p(25)}},
		Shown: api.PhasePaused, StepNumber: 1, StepCount: 4,
	}
	if got, want := watchLine(st), "hello-00002 Paused step 1/4 at 25% (paused by ann: look) | hello-00001=75%, hello-00002=25%"; got != want {
		t.Fatalf("watch line %q, want %q", got, want)
	}
}

func TestUILink(t *testing.T) {
	got := uiLink("http://localhost:8233/", "default", knative.TargetRef{Namespace: "shop", Kind: "Service", Name: "hello"})
	if want := "http://localhost:8233/namespaces/default/workflows/rollout%2Fshop%2Fservice%2Fhello"; got != want {
		t.Fatalf("uiLink = %s, want %s", got, want)
	}
}

// What the operator sees: the hold's time left at their clock, what the
// cluster serves beside what sluice wrote, and why a step is not moving.
func TestRenderStatusShowsServedTrafficAndRetries(t *testing.T) {
	p := func(n int64) *int64 { return &n }
	now := time.Now()
	st := api.Status{
		Target: knative.TargetRef{Namespace: "default", Kind: "Service", Name: "hello"},
		Object: knative.ObjectRef{Namespace: "default", Kind: "Service", Name: "hello"},
		Phase:  api.PhaseHolding, Candidate: "hello-00002", Stable: "hello-00001",
		HoldUntil:  now.Add(50 * time.Second),
		Live:       []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: p(80)}, {RevisionName: "hello-00002", Percent: p(20)}},
		HoldLeftAt: api.Duration(time.Minute)}
	st.At(now)
	st.Serving = []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: p(70)}, {RevisionName: "hello-00002", Percent: p(30)}}
	st.Pending = []api.PendingActivity{{Activity: api.ActivityApplyTraffic, Attempt: 4, LastError: "failed calling webhook"}}
	var b strings.Builder
	renderStatus(&b, st)
	for _, want := range []string{
		"Hold:       50s left",
		"Traffic:    hello-00001=80%, hello-00002=20% (written by sluice)",
		"Serving:    hello-00001=70%, hello-00002=30% (Service default/hello status, as Knative reports it)",
		"Retrying:   ApplyTraffic, attempt 4: failed calling webhook",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status does not say %q:\n%s", want, b.String())
		}
	}
}

func TestRenderStatusShowsCapacityStages(t *testing.T) {
	st := api.Status{
		Target: knative.TargetRef{Namespace: "default", Kind: "Service", Name: "gpu"}, Phase: api.PhaseHolding, Shown: api.PhaseHolding,
		Candidate: "gpu-00002", Stable: "gpu-00001", Weight: 13, StepNumber: 1, StepCount: 2,
		Steps:    []api.StepStatus{{Weight: 13, Hold: api.Duration(time.Minute)}, {Weight: 100}},
		Capacity: &api.CapacityStatus{StablePods: 8, CandidatePods: 1, StablePodsNow: 7, Stages: []capacity.Stage{{Candidate: 1, Stable: 7, Weight: 13}, {Candidate: 8, Weight: 100}}},
	}
	var out bytes.Buffer
	renderStatus(&out, st)
	for _, want := range []string{"Pods:", "gpu-00002 1 Ready, gpu-00001 7 Ready (stages from 8 stable pods)", "PODS (candidate / stable)", "1 / 7", "8 / 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// Comparisons get a table of their own, with the figures behind each
// verdict, and the round's score on one line.
func TestRenderStatusShowsComparisons(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	low, score := 29.0, 50.0
	failed := analysis.Measurement{Name: "latency", Kind: analysis.KindCompare, Result: analysis.Failed, At: at,
		Message: "the candidate is higher by 30 (95% interval [29, ∞)), beyond the 10 allowed",
		Compare: &analysis.CompareResult{Direction: analysis.Increase, Candidate: analysis.SampleSummary{Count: 10, Median: 130},
			Stable: analysis.SampleSummary{Count: 10, Median: 100}, Shift: 30, Low: &low, Allowed: 10, P: 0.0001}}
	st := api.Status{
		Target: knative.TargetRef{Namespace: "default", Kind: knative.KindService, Name: "hello"},
		Phase:  api.PhaseHolding, Candidate: "hello-00002", Stable: "hello-00001", StepNumber: 1, StepCount: 2,
		Analysis: &api.AnalysisState{Rounds: 1, Tallies: []analysis.Tally{
			{Name: "latency", Kind: analysis.KindCompare, Failures: 1, Last: &failed},
			{Name: "errors", Kind: analysis.KindCompare, DryRun: true, Last: &analysis.Measurement{Result: analysis.Inconclusive, At: at,
				Message: "too few samples: 3 of the candidate and 10 of the stable, 8 needed on each side",
				Compare: &analysis.CompareResult{Candidate: analysis.SampleSummary{Count: 3, Median: 1}, Stable: analysis.SampleSummary{Count: 10, Median: 1}}}},
			{Name: "score", Kind: analysis.KindScore, Failures: 1, Last: &analysis.Measurement{Name: "score", Kind: analysis.KindScore,
				Result: analysis.Failed, Value: &score, Min: new(float64), Max: &score, Message: "failed: latency"}},
		}},
	}
	var out bytes.Buffer
	renderStatus(&out, st)
	want := `
Analysis (1 rounds):
  Score: score 50 Failed (pass ≥ 50, marginal ≥ 0): failed: latency — rounds passed 0, marginal or failed 1, without a verdict 0
  Comparisons, candidate against stable over the same window:
  CHECK             RESULT        CANDIDATE   STABLE      SHIFT  INTERVAL  ALLOWED  P       AT
  latency           Failed        130 (n=10)  100 (n=10)  30     [29, ∞)   +10      0.0001  2026-11-29 10:00:00Z
  errors (dry run)  Inconclusive  1 (n=3)     1 (n=10)    -      -         -        -       2026-11-29 10:00:00Z
  latency: the candidate is higher by 30 (95% interval [29, ∞)), beyond the 10 allowed
  errors: too few samples: 3 of the candidate and 10 of the stable, 8 needed on each side
`
	if !strings.Contains(out.String(), want) {
		t.Fatalf("status output:\n%s\nwant within it:\n%s", out.String(), want)
	}
}
