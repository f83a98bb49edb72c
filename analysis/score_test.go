package analysis

import (
	"encoding/json"
	"strings"
	"testing"
)

func scored(name string, r Result, weight float64, critical, dry bool) Scored {
	return Scored{Measurement: Measurement{Name: name, Kind: KindCompare, Result: r, Message: name + " said so", DryRun: dry}, Weight: weight, Critical: critical}
}

func TestScoreWeighsCriticalAndMissingData(t *testing.T) {
	bands := Bands{Pass: 95, Marginal: 75}
	for _, tt := range []struct {
		name   string
		round  []Scored
		result Result
		score  float64 // -1: none
		msg    string
	}{
		{"all pass", []Scored{scored("a", Passed, 1, false, false), scored("b", Passed, 1, false, false)}, Passed, 100, ""},
		{"one of two fails", []Scored{scored("a", Passed, 1, false, false), scored("b", Failed, 1, false, false)}, Failed, 50, "failed: b"},
		{"weights", []Scored{scored("a", Passed, 4, false, false), scored("b", Failed, 1, false, false)}, Marginal, 80, "failed: b"},
		{"critical fails the round", []Scored{scored("a", Passed, 9, false, false), scored("b", Failed, 1, true, false)}, Failed, 0, "critical comparison b failed: b said so"},
		{"critical that passes", []Scored{scored("a", Passed, 1, true, false), scored("b", Passed, 1, false, false)}, Passed, 100, ""},
		{"half without a verdict", []Scored{scored("a", Passed, 1, false, false), scored("b", Inconclusive, 1, false, false)}, Inconclusive, -1, "1 of 2 comparisons had no verdict (b)"},
		{"errors count as no verdict", []Scored{scored("a", Passed, 1, false, false), scored("b", Error, 1, false, false), scored("c", Error, 1, false, false)}, Inconclusive, -1, "2 of 3"},
		{"a minority without a verdict is left out", []Scored{scored("a", Passed, 1, false, false), scored("b", Passed, 1, false, false), scored("c", Inconclusive, 5, false, false)}, Passed, 100, "no verdict: c"},
		{"dry runs are left out", []Scored{scored("a", Passed, 1, false, false), scored("b", Failed, 1, true, true)}, Passed, 100, ""},
		{"only dry runs", []Scored{scored("b", Failed, 1, false, true)}, Inconclusive, -1, "no comparison to score"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := Score(tt.round, bands)
			if m.Result != tt.result || m.Kind != KindScore || !strings.Contains(m.Message, tt.msg) {
				t.Fatalf("Score = %s %q", m.Result, m.Message)
			}
			if (tt.score < 0) != (m.Value == nil) || (m.Value != nil && *m.Value != tt.score) {
				t.Fatalf("score value = %v, want %v", m.Value, tt.score)
			}
		})
	}
}

func TestJudgeActsOnTheScore(t *testing.T) {
	score := func(r Result) Tally {
		t := Tally{Name: "score", Kind: KindScore}
		v := 50.0
		t.Record(Measurement{Name: "score", Kind: KindScore, Result: r, Value: &v, Min: new(float64), Max: new(float64), Message: "failed: latency"})
		return t
	}
	// A comparison's own failures never act: the score does.
	cmpTally := Tally{Name: "latency", Kind: KindCompare}
	cmpTally.Record(Measurement{Name: "latency", Kind: KindCompare, Result: Failed})
	cmpTally.Record(Measurement{Name: "latency", Kind: KindCompare, Result: Inconclusive})
	cmpTally.Record(Measurement{Name: "latency", Kind: KindCompare, Result: Inconclusive})
	for _, tt := range []struct {
		name    string
		tallies []Tally
		final   bool
		action  Action
		reason  string
	}{
		{"failed score rolls back", []Tally{cmpTally, score(Failed)}, false, Rollback, "the comparison score failed: score 50 Failed"},
		{"marginal pauses", []Tally{cmpTally, score(Marginal)}, false, Pause, "marginal"},
		{"no verdict mid-hold goes on", []Tally{cmpTally, score(Inconclusive)}, false, Continue, ""},
		{"no verdict at the step's end pauses", []Tally{cmpTally, score(Inconclusive)}, true, Pause, "could not judge the candidate by the end of the step"},
		{"passed goes on", []Tally{cmpTally, score(Passed)}, true, Continue, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Judge(tt.tallies, tt.final)
			if d.Action != tt.action || !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("Judge = %+v", d)
			}
		})
	}
	// A dry-run check past every limit does nothing.
	dry := Tally{Name: "p99", Kind: KindCheck, DryRun: true}
	dry.Record(Measurement{Result: Failed})
	dry.Record(Measurement{Result: Error})
	if d := Judge([]Tally{dry}, true); d.Action != Continue {
		t.Fatalf("a dry run acted: %+v", d)
	}
	// Errors of a comparison still pause, as a check's do.
	errs := Tally{Name: "latency", Kind: KindCompare, Limits: Limits{ConsecutiveError: 1}}
	errs.Record(Measurement{Result: Error, Message: "connection refused"})
	errs.Record(Measurement{Result: Error, Message: "connection refused"})
	if d := Judge([]Tally{errs}, false); d.Action != Pause || !strings.Contains(d.Reason, "connection refused") {
		t.Fatalf("errors = %+v", d)
	}
}

// A comparison's measurement survives the JSON of activity results, with
// an interval unbounded on one side.
func TestComparisonMeasurementRoundTrips(t *testing.T) {
	r := Comparison{Direction: Increase, Effect: Effect{Value: 10, Relative: true}, Confidence: 0.95, MinSamples: 5}.
		Compare([]float64{130, 131, 132, 133, 134, 135}, []float64{100, 101, 102, 103, 104, 105})
	m := Measurement{Name: "latency", Kind: KindCompare, Result: r.Result, Compare: &r, Value: &r.Shift}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Measurement
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Compare == nil || back.Compare.High != nil || back.Compare.Low == nil || back.Compare.Interval() != r.Interval() || back.Result != Failed {
		t.Fatalf("round trip: %s", b)
	}
	if s := back.Summary(); !strings.Contains(s, "latency Failed: candidate median 132.5 vs stable 102.5, shift 30 [") || !strings.Contains(s, ", ∞) (allowed 10.25") {
		t.Fatalf("summary: %s", s)
	}
}
