package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

func sample(t *testing.T) Input {
	t.Helper()
	p, err := config.FromAnnotations(map[string]string{config.AnnotationAnalysis: `
prometheus: http://prometheus:9090
checks:
  - {name: latency, builtin: latency-mean, compare: true}
  - {name: errors, builtin: success-rate, compare: true}
  - {name: p99, builtin: latency-p99, dryRun: true}
`}, config.BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	low := 17.6
	v := 80.0
	round := func(i int, latency analysis.Result) control.Round {
		when := at.Add(time.Duration(30*(i+1)) * time.Second)
		return control.Round{At: when, Measurements: []analysis.Measurement{
			{Name: "latency", Kind: analysis.KindCompare, Result: latency, Step: 1, Weight: 30, At: when, Message: "the candidate is higher",
				Compare: &analysis.CompareResult{Direction: analysis.Increase, Candidate: analysis.SampleSummary{Count: 8, Median: 80}, Stable: analysis.SampleSummary{Count: 8, Median: 62}, Shift: 18, Low: &low, Allowed: 6.2}},
			{Name: "errors", Kind: analysis.KindCompare, Result: analysis.Passed, Step: 1, Weight: 30, At: when,
				Compare: &analysis.CompareResult{Direction: analysis.Decrease, Candidate: analysis.SampleSummary{Count: 8, Median: 1}, Stable: analysis.SampleSummary{Count: 8, Median: 1}}},
			{Name: "p99", Kind: analysis.KindCheck, Result: analysis.Passed, Value: &v, Max: p.Analysis.Checks[2].Max, DryRun: true, Step: 1, Weight: 30, At: when},
		}}
	}
	return Input{
		Status: api.Status{
			Target: knative.TargetRef{Namespace: "shop", Kind: knative.KindService, Name: "cart"}, Policy: p,
			Phase: api.PhaseRolledBack, Shown: api.PhaseRolledBack, Outcome: api.OutcomeRolledBack,
			Reason:    "analysis: the comparison score failed: score 50 Failed",
			Candidate: "cart-00002", Stable: "cart-00001", Runs: 1,
			Steps:     []api.StepStatus{{Weight: 30, Hold: api.Duration(time.Minute), StartedAt: at.Add(5 * time.Second)}, {Weight: 100}},
			StartedAt: at, EndedAt: at.Add(95 * time.Second),
			Commands: []api.CommandRecord{{Name: "pause", By: "ann", Via: "update", At: at.Add(20 * time.Second), Reason: `checking <script>alert(1)</script>`}},
		},
		Rounds:    []control.Round{round(0, analysis.Passed), round(1, analysis.Passed), round(2, analysis.Failed)},
		Generated: at.Add(2 * time.Minute),
		Version:   "test",
	}
}

func TestReportIsSelfContainedAndComplete(t *testing.T) {
	var b bytes.Buffer
	if err := Render(&b, sample(t)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Nothing loaded from elsewhere: no script, no external reference.
	for _, bad := range []string{"<script", "src=", "@import", "url("} {
		if strings.Contains(out, bad) {
			t.Fatalf("the report contains %q", bad)
		}
	}
	if refs := regexp.MustCompile(`href="[^"#]`).FindAllString(out, -1); len(refs) != 0 {
		t.Fatalf("links out of the page without a UI link: %v", refs)
	}
	// A traffic chart, one per check and comparison, and the score.
	if n := strings.Count(out, "<svg"); n != 5 {
		t.Fatalf("%d charts, want 5", n)
	}
	for _, want := range []string{
		"shop/cart: cart-00001 → cart-00002", `class="state RolledBack"`,
		"latency <span class=\"muted\">(comparison)", "p99 <span class=\"muted\">(check, dry run: never acts)",
		"increase is bad beyond 10%, at 95% confidence, 8 samples a side at least, every 30s over 5m0s",
		// The score, recomputed per round: the third round scored 50.
		"score 50 Failed (pass ≥ 95, marginal ≥ 75)",
		"latency Failed: candidate median 80 vs stable 62, shift 18 [17.6, ∞)",
		// The command, its reason escaped.
		"<td>pause</td><td>ann</td>", "checking &lt;script&gt;alert(1)&lt;/script&gt;",
		"<b>RolledBack</b> at 2026-12-04 10:01:35Z: analysis: the comparison score failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The candidate's medians, the stable's and the allowed limit are drawn.
	for _, class := range []string{`class="candidate"`, `class="stable"`, `class="limit"`, `class="traffic"`, `class="command"`, `class="band-marginal"`} {
		if !strings.Contains(out, class) {
			t.Errorf("no %s in the charts", class)
		}
	}
}

func TestReportOfARunningRolloutWithoutAnalysis(t *testing.T) {
	in := sample(t)
	in.Status.Policy.Analysis, in.Rounds = nil, nil
	in.Status.Outcome, in.Status.EndedAt, in.Status.Shown = "", time.Time{}, api.PhaseHolding
	in.UILink = "http://localhost:8233/namespaces/default/workflows/x"
	var b bytes.Buffer
	if err := Render(&b, in); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Count(out, "<svg") != 1 || !strings.Contains(out, "still running (Holding)") || !strings.Contains(out, `href="http://localhost:8233/`) {
		t.Fatalf("report of a running rollout:\n%s", out)
	}
}
