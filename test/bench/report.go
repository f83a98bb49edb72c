package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Report is everything one `make bench` measured.
type Report struct {
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	Took    string    `json:"took"`
	Results []Result  `json:"results"`
	Targets []Target  `json:"targets"`
}

// Result is one configuration's figures. Times are milliseconds.
type Result struct {
	Run
	Error string `json:"error,omitempty"`
	// FloorError says why the floor loop did not finish: the level's own
	// figures stand, its floor and ratio do not.
	FloorError string `json:"floor_error,omitempty"`
	Failed     int    `json:"failed_rollouts"`
	// Unfinished rollouts were still running when the bench stopped waiting
	// (-timeout); the other figures are of the finished ones.
	Unfinished    int      `json:"unfinished_rollouts"`
	FailedReasons []string `json:"failed_reasons,omitempty"`
	// Trigger: the candidate Revision's Ready status written → sluice's
	// first traffic patch giving it a share arrives at the API server.
	Trigger Stats `json:"trigger_latency_ms"`
	// StepOverhead: time between two of sluice's traffic patches, less the hold.
	StepOverhead Stats `json:"step_overhead_ms"`
	// Floor: the same for the plain client-go loop, on the same stack.
	Floor    Stats   `json:"floor_step_overhead_ms"`
	RatioP50 float64 `json:"overhead_ratio_p50"`
	RatioP99 float64 `json:"overhead_ratio_p99"`
	// PerMinute: rollouts completed per minute, first trigger to last close.
	PerMinute float64     `json:"rollouts_per_minute"`
	Worker    Footprint   `json:"worker"`
	Receiver  Footprint   `json:"receiver"`
	History   HistoryCost `json:"history"`
	// APIByVerb: requests on Knative Serving's kinds while the rollouts ran,
	// from apiserver_request_total (every client).
	APIByVerb map[string]int `json:"api_requests_by_verb"`
	// APIByUser: the same from the audit log, by who asked: sluice's worker,
	// its receiver, and others (Knative's controllers, the ApiServerSource
	// adapter and the bench's trigger, which share the administrator's account).
	APIByUser           map[string]map[string]int `json:"api_requests_by_user"`
	WorkerWritesPerStep float64                   `json:"worker_writes_per_step"`
	// ReceiverEvents: the ApiServerSource events the receiver answered
	// while the rollouts ran, by type, and its mean time to answer. The
	// adapter sends each resource's events one at a time.
	ReceiverEvents map[string]ReceiverLoad `json:"receiver_events"`
	// Readiness counts what told each rollout its candidate was Ready
	// first: the Revision's CloudEvent, or the rollout's own watch.
	Readiness      map[string]int `json:"readiness_told_by"`
	ProgressEvents int            `json:"progress_events"`
	// CPUByProcess is what each process of the stack used while the
	// rollouts ran, and Busy the share of the machine's cores they used
	// together: which resource saturates first.
	CPUByProcess map[string]float64 `json:"cpu_by_process_seconds"`
	Busy         float64            `json:"machine_busy"`
	cpuLine      string
	// Breakdown splits the step gaps into their parts, from the histories.
	Breakdown StepBreakdown `json:"step_breakdown"`
	// Throttle: the first worker's waits in its Kubernetes rate limiter.
	Throttle Throttle `json:"kube_rate_limiter"`
}

// Stats summarise a sample in milliseconds.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func stats(v []float64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return Stats{N: len(s), P50: round(quantile(s, 0.5), 1), P99: round(quantile(s, 0.99), 1), Max: round(s[len(s)-1], 1)}
}

// quantile of a sorted sample, by the nearest-rank method.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// Target is one of the goals sluice works toward, and where it stands.
type Target struct {
	Goal   string `json:"goal"`
	Result string `json:"result"`
	Met    bool   `json:"met"`
}

func find(results []Result, rollouts, steps int) *Result {
	for i := range results {
		if results[i].Rollouts == rollouts && results[i].Steps == steps && results[i].Workers <= 1 && !results[i].NoRolloutResources && results[i].Error == "" {
			return &results[i]
		}
	}
	return nil
}

func targets(results []Result) []Target {
	var out []Target
	steps := 0
	if len(results) > 0 {
		steps = results[0].Steps
	}
	if r := find(results, 10, steps); r != nil {
		out = append(out, Target{"Ready → first traffic change p99 under 250 ms at 10 rollouts",
			fmt.Sprintf("%.1f ms", r.Trigger.P99), r.Trigger.N > 0 && r.Trigger.P99 < 250})
	}
	if r := find(results, 100, steps); r != nil {
		out = append(out,
			Target{"Ready → first traffic change p99 under 1 s at 100 rollouts",
				fmt.Sprintf("%.1f ms", r.Trigger.P99), r.Trigger.N > 0 && r.Trigger.P99 < 1000},
			Target{"step overhead p99 within 2x the floor at 100 rollouts",
				fmt.Sprintf("%.1f ms vs floor %.1f ms: %.2fx", r.StepOverhead.P99, r.Floor.P99, r.RatioP99), r.RatioP99 > 0 && r.RatioP99 <= 2})
	}
	if r := find(results, 500, steps); r != nil {
		out = append(out, Target{"500 rollouts: none fails, step overhead p99 under 1 s",
			fmt.Sprintf("%d failed, %d unfinished after the timeout, p99 %.1f ms", r.Failed, r.Unfinished, r.StepOverhead.P99),
			r.Failed == 0 && r.Unfinished == 0 && r.StepOverhead.N > 0 && r.StepOverhead.P99 < 1000})
	}
	out = append(out, knee(results))
	worstActions, worstWrites := 0.0, 0.0
	for _, r := range results {
		if r.Error == "" {
			worstActions = math.Max(worstActions, r.History.ActionsPerStep)
			worstWrites = math.Max(worstWrites, r.WorkerWritesPerStep)
		}
	}
	out = append(out,
		Target{"at most 6 billable Temporal actions per step", fmt.Sprintf("at most %.2f per step in any run", worstActions), worstActions > 0 && worstActions <= 6},
		Target{"at most 2 API-server writes per step", fmt.Sprintf("at most %.2f per step in any run", worstWrites), worstWrites > 0 && worstWrites <= 2})
	return out
}

// knee is the largest level (one worker) at which every rollout succeeded
// with step overhead p99 under 1 s, and what ran out at the next level up.
func knee(results []Result) Target {
	var levels []Result
	for _, r := range results {
		if r.Workers <= 1 && !r.NoRolloutResources && r.Error == "" && (len(levels) == 0 || r.Steps == levels[0].Steps) {
			levels = append(levels, r)
		}
	}
	sort.Slice(levels, func(i, j int) bool { return levels[i].Rollouts < levels[j].Rollouts })
	best, next := 0, -1
	for i, r := range levels {
		if r.Failed == 0 && r.Unfinished == 0 && r.StepOverhead.N > 0 && r.StepOverhead.P99 < 1000 {
			best = r.Rollouts
			continue
		}
		next = i
		break
	}
	goal := "the most concurrent rollouts with every one correct and step overhead p99 under 1 s (the knee)"
	if next < 0 {
		return Target{goal, fmt.Sprintf("%d, the largest level run: no knee within the levels", best), best > 0}
	}
	r := levels[next]
	return Target{goal, fmt.Sprintf("%d; at %d, step overhead p99 %.0f ms with the machine %.0f%% busy (%s)", best, r.Rollouts, r.StepOverhead.P99, r.Busy*100, r.cpuLine), best > 0}
}

// Markdown renders the report as tables.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice bench: %d cores (%s), %s/%s, took %s (worker CPU and peak RSS: all worker processes together)\n\n", r.Machine.Cores, r.Machine.CPU, r.Machine.GOOS, r.Machine.GOARCH, r.Took)
	b.WriteString("| rollouts × steps | failed / unfinished | trigger p50 / p99 ms | step overhead p50 / p99 ms | floor p50 / p99 ms | ratio p50 / p99 | rollouts/min | worker CPU s / peak RSS MiB | receiver CPU s / peak RSS MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Results {
		if x.Error != "" {
			fmt.Fprintf(&b, "| %s | error: %s |||||||\n", x.Label(), x.Error)
			continue
		}
		fmt.Fprintf(&b, "| %s | %d / %d | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.2f / %.2f | %.0f | %.1f / %.0f | %.1f / %.0f |\n",
			x.Label(), x.Failed, x.Unfinished, x.Trigger.P50, x.Trigger.P99, x.StepOverhead.P50, x.StepOverhead.P99, x.Floor.P50, x.Floor.P99,
			x.RatioP50, x.RatioP99, x.PerMinute, x.Worker.CPUSeconds, x.Worker.PeakRSSMiB, x.Receiver.CPUSeconds, x.Receiver.PeakRSSMiB)
	}
	for _, x := range r.Results {
		if x.FloorError != "" {
			fmt.Fprintf(&b, "\nAt %s the floor loop did not finish (its columns are 0): %s\n", x.Label(), x.FloorError)
		}
	}
	b.WriteString("\nCost per rollout\n\n")
	b.WriteString("| rollouts × steps | history events | billable actions (per step) | by kind | worker writes per step | API requests by sluice (worker; receiver) | API requests, all clients, by verb |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, x := range r.Results {
		if x.Error != "" {
			continue
		}
		n := float64(x.Rollouts)
		fmt.Fprintf(&b, "| %s | %.1f | %.1f (%.2f) | %s | %.2f | %s; %s | %s |\n", x.Label(),
			x.History.EventsPerRollout, x.History.ActionsPerRollout, x.History.ActionsPerStep, perKind(x.History.Actions),
			x.WorkerWritesPerStep, perRollout(x.APIByUser["worker"], n), perRollout(x.APIByUser["receiver"], n), perRollout(x.APIByVerb, n))
	}
	b.WriteString("\nReceiver: events answered while the rollouts ran (count, mean ms to answer), and what told each rollout its candidate was Ready first\n\n| rollouts × steps | events | readiness told by |\n|---|---|---|\n")
	for _, x := range r.Results {
		if x.Error != "" {
			continue
		}
		var parts []string
		for _, k := range sortedKeys(x.ReceiverEvents) {
			parts = append(parts, fmt.Sprintf("%s %d × %.1f ms", k, x.ReceiverEvents[k].Events, x.ReceiverEvents[k].MeanMS))
		}
		var told []string
		for _, k := range sortedKeys(x.Readiness) {
			told = append(told, fmt.Sprintf("%s %d", k, x.Readiness[k]))
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", x.Label(), strings.Join(parts, ", "), strings.Join(told, ", "))
	}
	b.WriteString("\nWhere the time went: CPU seconds of each process while the rollouts ran (machine busy: all of them over the window and its cores), and the step gaps split by the histories (ms, p50 / p99)\n\n")
	for _, x := range r.Results {
		if x.Error != "" {
			continue
		}
		d := x.Breakdown
		fmt.Fprintf(&b, "- %s: busy %.0f%%: %s\n  - the worker's Kubernetes rate limiter: %d requests, mean wait %.2f ms, %d waited over 100 ms\n",
			x.Label(), x.Busy*100, x.cpuLine, x.Throttle.Requests, x.Throttle.MeanMS, x.Throttle.Over100)
		b.WriteString(d.text())
	}
	b.WriteString("\nTargets\n\n| goal | where sluice stands | met |\n|---|---|---|\n")
	for _, t := range r.Targets {
		met := "no"
		if t.Met {
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Goal, t.Result, met)
	}
	return b.String()
}

func perKind(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func perRollout(m map[string]int, n float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(m[k])/n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
