package analysis

import (
	"math"
	"strings"
	"testing"
)

func f(v float64) *float64 { return &v }

func TestEvaluate(t *testing.T) {
	tests := []struct {
		value, min, max *float64
		want            Result
	}{
		{f(0.995), f(0.99), nil, Passed},
		{f(0.99), f(0.99), nil, Passed}, // bounds are inclusive
		{f(0.8), f(0.99), nil, Failed},
		{f(600), nil, f(500), Failed},
		{f(-1), f(0), f(1), Failed},
		{f(0.5), f(0), f(1), Passed},
		{nil, f(0), nil, Inconclusive},
		{f(math.NaN()), f(0), nil, Inconclusive},
	}
	for i, tt := range tests {
		if got := Evaluate(tt.value, tt.min, tt.max); got != tt.want {
			t.Errorf("%d: Evaluate = %s, want %s", i, got, tt.want)
		}
	}
	if got := Range(f(0.99), nil); got != "[0.99, ∞]" {
		t.Errorf("Range = %q", got)
	}
}

func TestJudgeLimits(t *testing.T) {
	rate := Tally{Name: "success-rate", Limits: Limits{Failure: 1, ConsecutiveError: 2}}
	hook := Tally{Name: "smoke", Limits: Limits{}}
	record := func(t *Tally, rs ...Result) {
		for _, r := range rs {
			t.Record(Measurement{Name: t.Name, Result: r, Message: "m-" + string(r)})
		}
	}
	record(&rate, Failed, Passed)
	if d := Judge([]Tally{rate, hook}, false); d.Action != Continue {
		t.Fatalf("one failure under limit 1: %+v", d)
	}
	record(&rate, Error, Error)
	if d := Judge([]Tally{rate}, false); d.Action != Continue {
		t.Fatalf("two errors under limit 2: %+v", d)
	}
	record(&rate, Error)
	d := Judge([]Tally{rate}, false)
	if d.Action != Pause || !strings.Contains(d.Reason, "could not be measured 3 times in a row (consecutive error limit 2): m-Error") {
		t.Fatalf("third error: %+v", d)
	}
	rate.Forgive()
	record(&rate, Error, Passed, Error, Error)
	if d := Judge([]Tally{rate}, false); d.Action != Continue || rate.ConsecutiveErrors != 2 || rate.Errors != 6 {
		t.Fatalf("a pass ends the run of errors: %+v %+v", d, rate)
	}
	// Rollback wins over pause, whatever the order.
	record(&hook, Inconclusive)
	record(&rate, Failed)
	d = Judge([]Tally{hook, rate}, false)
	if d.Action != Rollback || !strings.Contains(d.Reason, "success-rate failed 2 times (failure limit 1)") {
		t.Fatalf("rollback over pause: %+v", d)
	}
	d = Judge([]Tally{hook}, false)
	if d.Action != Pause || !strings.Contains(d.Reason, "smoke had no data (inconclusive limit 0): m-Inconclusive") {
		t.Fatalf("inconclusive: %+v", d)
	}
	// The inconclusive limit counts a run: data in between starts it over.
	data := Tally{Name: "p99", Limits: Limits{Inconclusive: 1}}
	record(&data, Inconclusive, Passed, Inconclusive, Passed)
	if d := Judge([]Tally{data}, false); d.Action != Continue || data.Inconclusives != 2 {
		t.Fatalf("separate rounds without data: %+v %+v", d, data)
	}
	record(&data, Inconclusive, Inconclusive)
	if d := Judge([]Tally{data}, false); d.Action != Pause || !strings.Contains(d.Reason, "p99 had no data 2 times in a row (inconclusive limit 1)") {
		t.Fatalf("two in a row: %+v", d)
	}
}
