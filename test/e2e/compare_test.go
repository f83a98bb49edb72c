package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/browser"
	"github.com/sluicehq/sluice/test/requestsim"
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
	t.Parallel()
	c := ctl(t)
	firstRolloutOf(t, c, "cmp1", compared(nil), latency("60ms"))
	deploy(t, "cmp1", "example.com/cmp1:v2", nil, latency("78ms"))
	st := waitOutcome(t, c, svcTarget("cmp1"), "cmp1-00002", 2*time.Minute)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "the comparison score failed") || !strings.Contains(st.Reason, "failed: latency") {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "cmp1"); got != "cmp1-00001=100%" {
		t.Fatalf("traffic after rollback: %s", got)
	}
	var failed *analysis.Measurement
	for _, m := range historyMeasurements(t, c, "cmp1", 2) {
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
	checkReport(t, "cmp1", "cmp1-00001 → cmp1-00002", "RolledBack", "score 50 Failed", "latency Failed: candidate median")
}

// checkReport writes the Service's rollout report with the CLI, checks
// what it holds, and opens it in a real headless Chromium (when the tests
// have one): it renders with nothing loaded from anywhere else. The
// screenshot is a test artifact, report.png (docs/report.png is one).
func checkReport(t *testing.T, name string, want ...string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "report.html")
	out, err := sluice(t, "report", name, "-f", file)
	if err != nil || !strings.Contains(out, "wrote "+file) {
		t.Fatalf("sluice report: %v\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	// The traffic, three checks and the score.
	if n := strings.Count(html, "<svg"); n != 5 || strings.Contains(html, "<script") {
		t.Fatalf("the report has %d charts (want 5) or a script", n)
	}
	for _, w := range want {
		if !strings.Contains(html, w) {
			t.Fatalf("the report lacks %q", w)
		}
	}
	chromium := os.Getenv("SLUICE_CHROMIUM_BIN")
	if chromium == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("SLUICE_CHROMIUM_BIN is not set: run the tests with `make test`, which installs chromium")
		}
		t.Log("SLUICE_CHROMIUM_BIN is not set: the report is not opened in a browser")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	br, err := browser.Start(ctx, chromium, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	p, err := br.Open("file://" + file)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.WaitText(ctx, append([]string{"Traffic", "Checks", "Commands", "Outcome"}, want[:2]...)...); err != nil {
		t.Fatalf("the report in Chromium: %v", err)
	}
	// Every chart is drawn with a size, and the page fetched nothing.
	got, err := p.Eval(`[document.querySelectorAll('svg').length,
		Array.from(document.querySelectorAll('svg')).every(s => s.getBoundingClientRect().width > 300 && s.querySelector('path, circle')),
		performance.getEntriesByType('resource').length].join(',')`)
	if err != nil || got != "5,true,0" {
		t.Fatalf("charts, drawn, resources fetched: %q, %v", got, err)
	}
	artifacts := os.Getenv("SLUICE_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts, "report.png")
	if err := p.Screenshot(shot); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 20_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("the report in Chromium: %s", shot)
}

// A dependency that makes every Revision slow (both answer in 130 ms, over
// the dry run's fixed 120 ms) does not roll back a candidate that is no
// worse than the stable: the comparison passes, and the fixed threshold,
// which fails, only says so.
func TestComparisonPassesWhenBothAreSlow(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRolloutOf(t, c, "cmp2", compared(nil), latency("130ms"))
	deploy(t, "cmp2", "example.com/cmp2:v2", nil, latency("130ms"))
	st := waitOutcome(t, c, svcTarget("cmp2"), "cmp2-00002", 2*time.Minute)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "cmp2") != "cmp2-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "cmp2"))
	}
	var passed, thresholdFailed int
	for _, m := range historyMeasurements(t, c, "cmp2", 2) {
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
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "cmp3", compared(map[string]string{requestsim.AnnotationRate: "0.1"}))
	deploy(t, "cmp3", "example.com/cmp3:v2", nil, nil)
	st := waitStatus(t, c, svcTarget("cmp3"), 2*time.Minute, "the pause without a verdict", func(s api.Status) bool {
		return s.Candidate == "cmp3-00002" && (s.Paused || s.Phase.Done())
	})
	if !st.Paused || st.Weight != 30 || !strings.Contains(st.PauseReason, "could not judge the candidate by the end of the step") || !strings.Contains(st.PauseReason, "too few samples") && !strings.Contains(st.PauseReason, "no verdict") {
		t.Fatalf("paused=%v weight %d phase %s: %s", st.Paused, st.Weight, st.Phase, st.PauseReason)
	}
	if out, err := sluice(t, "abort", "cmp3", "--reason", "too little traffic to judge"); err != nil {
		t.Fatalf("abort: %v\n%s", err, out)
	}
	if st := waitOutcome(t, c, svcTarget("cmp3"), "cmp3-00002", time.Minute); st.Outcome != api.OutcomeAborted || serviceTraffic(t, "cmp3") != "cmp3-00001=100%" {
		t.Fatalf("outcome %s, traffic %s", st.Outcome, serviceTraffic(t, "cmp3"))
	}
}
