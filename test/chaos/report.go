package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// quickPlans are the plans with no wait of their own longer than a 1 s
// hold (a gate's promote is sent as soon as it is reached): a rollout of
// one that is slow to move after a fault was held up by the fault.
var quickPlans = map[string]bool{planFirst: true, planSteps: true, planGate: true, planFail: true}

// recovery is, for each kind of fault, how long the rollouts in flight
// when it ended took to move again: to their next write, or their end.
func recovery(faults []fault, expects []*expect, writes []write) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, f := range faults {
		for _, e := range expects {
			if !quickPlans[e.Plan] || e.Deployed.After(f.End) || (!e.Ended.IsZero() && e.Ended.Before(f.End)) {
				continue
			}
			next := e.Ended
			for _, w := range writes {
				if w.Service == e.Service && w.At.After(f.End) {
					if next.IsZero() || w.At.Before(next) {
						next = w.At
					}
					break
				}
			}
			if !next.IsZero() {
				out[f.Kind] = append(out[f.Kind], next.Sub(f.End))
			}
		}
	}
	return out
}

// quantile is the nearest-rank q-quantile of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	return s[min(i, len(s)-1)]
}

// summary is what one chaos run did and found, as docs/reliability.md
// reports it.
type summary struct {
	Seed       uint64
	Kinds      []string // the faults the run could inject
	Temporal   string   // which Temporal it ran on
	Took       time.Duration
	Rollouts   int
	Outcomes   map[string]int // plan → outcome → count, as "plan outcome"
	Faults     []fault
	Recovery   map[string][]time.Duration
	Events     map[string]int
	Touches    int
	Edits      int
	Writes     int
	Ready      int
	Violations []violation
	// HistoryCutShort are workflow tasks that failed because the worker
	// read a history cut short by a fault, and were given again.
	HistoryCutShort []string
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "chaos: seed %d, %d rollouts in %s on %s, %d faults, %d writes by sluice, %d Revisions Ready, %d metadata edits (409s for sluice), %d hand edits of traffic\n",
		s.Seed, s.Rollouts, s.Took.Round(time.Second), s.Temporal, len(s.Faults), s.Writes, s.Ready, s.Touches, s.Edits)
	fmt.Fprintf(w, "\n| plan | outcome | rollouts |\n|---|---|---|\n")
	for _, k := range sortedKeys(s.Outcomes) {
		plan, outcome, _ := strings.Cut(k, " ")
		fmt.Fprintf(w, "| %s | %s | %d |\n", plan, outcome, s.Outcomes[k])
	}
	kinds := map[string][]fault{}
	for _, f := range s.Faults {
		kinds[f.Kind] = append(kinds[f.Kind], f)
	}
	fmt.Fprintf(w, "\n| fault | injected | on | rollouts in flight after | recovery p50 | recovery p99 |\n|---|---|---|---|---|---|\n")
	for _, k := range s.Kinds {
		fs := kinds[k]
		on := map[string]int{}
		for _, f := range fs {
			on[f.On]++
		}
		var ons []string
		for _, o := range sortedKeys(on) {
			ons = append(ons, fmt.Sprintf("%s ×%d", o, on[o]))
		}
		r := s.Recovery[k]
		fmt.Fprintf(w, "| %s | %d | %s | %d | %s | %s |\n", k, len(fs), strings.Join(ons, ", "), len(r),
			quantile(r, 0.5).Round(time.Millisecond), quantile(r, 0.99).Round(time.Millisecond))
	}
	for _, k := range s.Kinds {
		var settle []time.Duration
		for _, f := range kinds[k] {
			if !f.Settled.IsZero() {
				settle = append(settle, f.Settled.Sub(f.End))
			}
		}
		if len(settle) > 0 {
			fmt.Fprintf(w, "\nafter %s, Knative programmed traffic again in: p50 %s, max %s (the next fault waited for it)",
				k, quantile(settle, 0.5).Round(100*time.Millisecond), quantile(settle, 1).Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(w, "\nevents to the receiver: %s\n", fmtCounts(s.Events))
	fmt.Fprintf(w, "workflow tasks given again after the worker read a history cut short by a fault: %d\n", len(s.HistoryCutShort))
	for _, f := range s.HistoryCutShort {
		fmt.Fprintf(w, "  %s\n", f)
	}
	fmt.Fprintf(w, "invariant violations: %d\n", len(s.Violations))
	for _, v := range s.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
