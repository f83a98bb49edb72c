package workflows

import (
	"testing"
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

func TestTrafficAt(t *testing.T) {
	base := []servingv1.TrafficTarget{tgt("s", 70, ""), tgt("x", 30, "extra"), tgt("s", 0, "current")}
	tests := []struct {
		name     string
		baseline []servingv1.TrafficTarget
		stable   string
		weight   int64
		want     string
	}{
		{"10% of stable's 70", base, "s", 10, "s=63%, x=30% (tag extra), s=0% (tag current), c=7%"},
		{"50%", base, "s", 50, "s=35%, x=30% (tag extra), s=0% (tag current), c=35%"},
		{"100% drops the untagged stable, keeps its tag", base, "s", 100, "x=30% (tag extra), s=0% (tag current), c=70%"},
		{"1% of 70 rounds to 1", base, "s", 1, "s=69%, x=30% (tag extra), s=0% (tag current), c=1%"},
		{"25% of 70 rounds to 18", base, "s", 25, "s=52%, x=30% (tag extra), s=0% (tag current), c=18%"},
		{"stable split over two entries", []servingv1.TrafficTarget{tgt("s", 50, ""), tgt("s", 50, "blue")}, "s", 75, "s=25% (tag blue), c=75%"},
		{"first revision", []servingv1.TrafficTarget{tgt("@latest", 100, "")}, "", 100, "c=100%"},
		// A tagged latestRevision target keeps its tag and keeps following
		// the latest Revision; only its share moves.
		{"first revision keeps a tagged latestRevision target", []servingv1.TrafficTarget{tgt("@latest", 100, ""), tgt("@latest", 0, "latest")}, "", 100,
			"latest=0% (tag latest), c=100%"},
		{"first revision, the share on a tagged target", []servingv1.TrafficTarget{tgt("@latest", 100, "current")}, "", 100,
			"latest=0% (tag current), c=100%"},
		{"a 0% latestRevision target stays as it is", []servingv1.TrafficTarget{tgt("s", 100, "prod"), tgt("@latest", 0, "latest")}, "s", 100,
			"s=0% (tag prod), latest=0% (tag latest), c=100%"},
		// A list that already gives the candidate a share (an operator's, or
		// Knative's before sluice pinned it) moves only the difference.
		{"the candidate's share is counted", []servingv1.TrafficTarget{tgt("s", 70, ""), tgt("c", 30, "")}, "s", 50, "s=50%, c=50%"},
		{"a tagged candidate target keeps its tag", []servingv1.TrafficTarget{tgt("s", 70, ""), tgt("c", 0, "debug"), tgt("c", 30, "")}, "s", 50,
			"s=50%, c=0% (tag debug), c=50%"},
		{"weight 0 gives the candidate's share back", []servingv1.TrafficTarget{tgt("s", 70, ""), tgt("x", 10, "extra"), tgt("c", 20, "")}, "s", 0,
			"s=90%, x=10% (tag extra)"},
		{"weight 0 with no stable target left", []servingv1.TrafficTarget{tgt("c", 100, ""), tgt("c", 0, "debug")}, "s", 0,
			"c=0% (tag debug), s=100%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := trafficAt(tt.baseline, tt.stable, "c", tt.weight)
			if s := knative.FormatTraffic(got); s != tt.want {
				t.Fatalf("trafficAt = %s\nwant        %s", s, tt.want)
			}
			if err := knative.ValidateTraffic(knative.KindService, got); err != nil {
				t.Fatalf("trafficAt produced an invalid list %s: %v", knative.FormatTraffic(got), err)
			}
		})
	}
}

func TestTrafficAtNeverChangesBaseline(t *testing.T) {
	base := []servingv1.TrafficTarget{tgt("s", 100, "")}
	_ = trafficAt(base, "s", "c", 50)
	if *base[0].Percent != 100 {
		t.Fatal("trafficAt modified its input")
	}
}

func TestPinAndRollbackTraffic(t *testing.T) {
	orig := []servingv1.TrafficTarget{tgt("@latest", 90, ""), tgt("old", 10, "legacy")}
	pinned := pinLatest(orig, nil, "s")
	if got := knative.FormatTraffic(pinned); got != "s=90%, old=10% (tag legacy)" {
		t.Fatalf("pinLatest = %s", got)
	}
	st := &state{Original: orig, Stable: "s"}
	if got := rollbackTraffic(st); !knative.SameTraffic(got, orig) {
		t.Fatalf("rollback before the candidate is Ready must restore the exact list, got %s", knative.FormatTraffic(got))
	}
	st.CandidateReady = true
	if got := rollbackTraffic(st); !knative.SameTraffic(got, pinned) {
		t.Fatalf("rollback with a Ready candidate must pin latestRevision, got %s", knative.FormatTraffic(got))
	}
}

func TestPinLatest(t *testing.T) {
	orig := []servingv1.TrafficTarget{tgt("@latest", 80, ""), tgt("@latest", 0, "latest"), tgt("@latest", 20, "blue")}
	tests := []struct {
		name   string
		routed []string
		want   string
	}{
		{"to the stable Revision", nil, "s=80%, latest=0% (tag latest), s=20% (tag blue)"},
		{"to where status routes each target", []string{"c", "c", "s"}, "c=80%, latest=0% (tag latest), s=20% (tag blue)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := knative.FormatTraffic(pinLatest(orig, tt.routed, "s")); got != tt.want {
				t.Fatalf("pinLatest = %s, want %s", got, tt.want)
			}
		})
	}
	if w := candidateShare(pinLatest(orig, []string{"c", "c", "s"}, "s"), "s", "c"); w != 80 {
		t.Fatalf("candidateShare = %d, want 80", w)
	}
}

func TestDetailsMarkdown(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 30, 0, time.UTC)
	p := func(n int64) *int64 { return &n }
	r := &rollout{st: state{
		Target: knative.TargetRef{Namespace: "default", Kind: "Service", Name: "hello"}, Phase: api.PhaseHolding,
		Stable: "hello-00001", Candidate: "hello-00002", Step: 0, HoldUntil: now.Add(90 * time.Second),
		Live:     []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: p(75)}, {RevisionName: "hello-00002", Percent: p(25)}},
		Policy:   config.Policy{Steps: []config.Step{{Weight: 25, Hold: 2 * time.Minute}, {Weight: 100, Gate: true}}},
		StepRuns: []stepRun{{StartedAt: now.Add(-30 * time.Second)}, {}},
	}}
	want := "**Holding** · hello-00001=75%, hello-00002=25% · hold ends at 10:02:00 UTC\n\n" +
		"| step | weight | hold | gate | started | ended |\n|---|---|---|---|---|---|\n" +
		"| 1 ◀ | 25% | 2m0s |  | 10:00:00 |  |\n" +
		"| 2 | 100% | 0s | manual |  |  |\n"
	if got := details(view(&r.st, now)); got != want {
		t.Fatalf("details:\n%s\nwant:\n%s", got, want)
	}
	// With analysis, one line of checks comes before the steps.
	v, lo := 0.8, 0.99
	r.st.Analysis = &analysisState{Tallies: []analysis.Tally{
		{Name: "success-rate", Kind: analysis.KindCheck, Passed: 2, Failures: 1,
			Last: &analysis.Measurement{Result: analysis.Failed, Value: &v, Min: &lo}},
		{Name: "smoke", Kind: analysis.KindWebhook, Passed: 3, Last: &analysis.Measurement{Result: analysis.Passed, StatusCode: 204}},
	}}
	want = "**Holding** · hello-00001=75%, hello-00002=25% · hold ends at 10:02:00 UTC" +
		" · success-rate 0.8 ✗ (1 failed) · smoke HTTP 204 ✓\n\n" +
		"| step | weight | hold | gate | started | ended |\n|---|---|---|---|---|---|\n" +
		"| 1 ◀ | 25% | 2m0s |  | 10:00:00 |  |\n" +
		"| 2 | 100% | 0s | manual |  |  |\n"
	if got := details(view(&r.st, now)); got != want {
		t.Fatalf("details with analysis:\n%s\nwant:\n%s", got, want)
	}
	// A comparison shows its shift from the stable; the score its band.
	shift, score, low := 30.0, 50.0, 29.0
	r.st.Analysis = &analysisState{Tallies: []analysis.Tally{
		{Name: "latency", Kind: analysis.KindCompare, Failures: 1, Last: &analysis.Measurement{Result: analysis.Failed, Value: &shift,
			Compare: &analysis.CompareResult{Direction: analysis.Increase, Shift: shift, Low: &low, Allowed: 10}}},
		{Name: "p99", Kind: analysis.KindCompare, DryRun: true, Last: &analysis.Measurement{Result: analysis.Inconclusive}},
		{Name: "score", Kind: analysis.KindScore, Failures: 1, Last: &analysis.Measurement{Result: analysis.Marginal, Value: &score}},
	}}
	want = "**Holding** · hello-00001=75%, hello-00002=25% · hold ends at 10:02:00 UTC" +
		" · latency +30 vs stable (allowed +10) ✗ (1 failed) · p99 (dry run) no data · score 50 ~ (1 failed)\n\n" +
		"| step | weight | hold | gate | started | ended |\n|---|---|---|---|---|---|\n" +
		"| 1 ◀ | 25% | 2m0s |  | 10:00:00 |  |\n" +
		"| 2 | 100% | 0s | manual |  |  |\n"
	if got := details(view(&r.st, now)); got != want {
		t.Fatalf("details with comparisons:\n%s\nwant:\n%s", got, want)
	}
}
