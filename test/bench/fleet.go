package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/stack"
)

// The fleet run: sluice and Temporal alone at thousands of rollouts at once,
// on Temporal's production topology, with Knative Serving played by
// test/servingstandin (every Revision Ready at once, status following spec
// at once), so what saturates is sluice's or Temporal's, not Knative's.

// FleetRun is one fleet configuration, on a fresh stack.
type FleetRun struct {
	Rollouts int           `json:"rollouts"`
	Workers  int           `json:"workers"`
	Steps    int           `json:"steps"`
	Hold     time.Duration `json:"hold_ns"`
}

// FleetResult is one fleet run's figures. Times are milliseconds unless
// named otherwise.
type FleetResult struct {
	FleetRun
	Error string `json:"error,omitempty"`
	// SetupSeconds: the Services created and their first Revisions Ready.
	SetupSeconds float64 `json:"setup_seconds"`
	// WindowSeconds: the first trigger → the last rollout closed.
	WindowSeconds float64 `json:"window_seconds"`
	Succeeded     int     `json:"succeeded"`
	// Failed closed otherwise; Unfinished were still running at the timeout.
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// FailedReasons says why, for up to failedShown of the failed: each
	// rollout's Service, outcome and the reason its result gives.
	FailedReasons []string `json:"failed_reasons,omitempty"`
	// PeakRunning is the most rollouts Temporal's visibility counted
	// running at once (sampled every few seconds), and AllRunning whether
	// every rollout of the run was running at one sample.
	PeakRunning int `json:"peak_running"`
	// StartedSeconds: the first trigger → every rollout started (to the
	// sample that first counted them all), and StartsPerSecond the rate.
	StartedSeconds  float64 `json:"all_started_seconds"`
	StartsPerSecond float64 `json:"starts_per_second"`
	PerMinute       float64 `json:"rollouts_per_minute"`
	// Worker CPU over the window, per rollout and per step, and the cores
	// it used on average; RolloutsPerCoreMinute is how many of these
	// rollouts one worker core completes a minute at that cost.
	WorkerCPUSeconds      float64 `json:"worker_cpu_seconds"`
	WorkerCores           float64 `json:"worker_cores"`
	WorkerCPUPerRollout   float64 `json:"worker_cpu_ms_per_rollout"`
	WorkerCPUPerStep      float64 `json:"worker_cpu_ms_per_step"`
	RolloutsPerCoreMinute float64 `json:"rollouts_per_worker_core_minute"`
	// Memory: the workers' resident memory before the trigger, at the
	// sample with the most rollouts running, and at its peak (VmHWM);
	// KiBPerRunning is the growth per rollout running at that sample.
	WorkerRSSBeforeMiB float64 `json:"worker_rss_before_mib"`
	WorkerRSSAtPeakMiB float64 `json:"worker_rss_at_peak_running_mib"`
	WorkerPeakRSSMiB   float64 `json:"worker_peak_rss_mib"`
	KiBPerRunning      float64 `json:"worker_kib_per_running_rollout"`
	ReceiverCPUSeconds float64 `json:"receiver_cpu_seconds"`
	// ReceiverEvents: the ApiServerSource events the receiver answered in
	// the window, by type, and its mean time to answer one.
	ReceiverEvents map[string]ReceiverLoad `json:"receiver_events"`
	// Temporal: every service and PostgreSQL with its backends.
	TemporalCPUSeconds    float64 `json:"temporal_cpu_seconds"`
	TemporalCPUPerRollout float64 `json:"temporal_cpu_ms_per_rollout"`
	// History is counted on a sample of the rollouts (HistorySample).
	HistorySample          int         `json:"history_sample"`
	History                HistoryCost `json:"history"`
	HistoryBytesPerRollout float64     `json:"history_bytes_per_rollout"`
	// StartLag: the candidate Ready (the stand-in's write) → the first
	// traffic write started by a worker; Breakdown splits the steps.
	StartLag  Stats         `json:"ready_to_first_write_started_ms"`
	Breakdown StepBreakdown `json:"step_breakdown"`
	Throttle  Throttle      `json:"kube_rate_limiter"`
	// CPUByProcess and Busy say which process saturates first.
	CPUByProcess map[string]float64 `json:"cpu_by_process_seconds"`
	Busy         float64            `json:"machine_busy"`
	cpuLine      string
}

// FleetReport is everything one fleet run measured.
type FleetReport struct {
	Machine Machine       `json:"machine"`
	Started time.Time     `json:"started"`
	Took    string        `json:"took"`
	Results []FleetResult `json:"results"`
}

// fleetSample bounds how many histories a run reads: reading every one of
// 5,000 would be a load of its own on the Temporal it measures.
const fleetSample = 200

// runFleet measures each level with each count of workers and prints the
// report; it returns the exit code.
func runFleet(levels, workers string, steps int, hold, timeout time.Duration, e env) int {
	var runs []FleetRun
	for _, l := range strings.Split(levels, ",") {
		for _, w := range strings.Split(workers, ",") {
			n, err1 := strconv.Atoi(strings.TrimSpace(l))
			k, err2 := strconv.Atoi(strings.TrimSpace(w))
			if err1 != nil || err2 != nil || n < 1 || k < 1 {
				fmt.Fprintf(os.Stderr, "bench: -fleet %q and -fleet-workers %q must be positive integers\n", levels, workers)
				return 2
			}
			runs = append(runs, FleetRun{Rollouts: n, Workers: k, Steps: steps, Hold: hold})
		}
	}
	began := time.Now()
	report := FleetReport{Machine: machine(), Started: began.UTC()}
	failed := false
	for _, r := range runs {
		e.log.Info("bench-fleet: run", "rollouts", r.Rollouts, "workers", r.Workers, "steps", r.Steps, "hold", r.Hold)
		res, err := measureFleet(context.Background(), r, e, timeout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-fleet: %d rollouts, %d workers: %v\n", r.Rollouts, r.Workers, err)
			res.Error, failed = err.Error(), true
		}
		e.log.Info("bench-fleet: done", "rollouts", r.Rollouts, "workers", r.Workers, "cpu", res.cpuLine)
		report.Results = append(report.Results, res)
		// Written after every run: a level of 5,000 takes most of an
		// hour, and what finished stands if a later one is stopped.
		report.Took = time.Since(began).Round(time.Second).String()
		if err := writeFleet(report); err != nil {
			fmt.Fprintln(os.Stderr, "bench-fleet:", err)
			return 1
		}
	}
	fmt.Print(fleetMarkdown(report))
	if failed {
		return 1
	}
	return 0
}

// writeFleet writes the report as JSON to $BENCH_OUT (default
// fleet-results.json).
func writeFleet(report FleetReport) error {
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "fleet-results.json"
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench-fleet: wrote %s (took %s)\n", out, report.Took)
	return nil
}

func measureFleet(ctx context.Context, r FleetRun, e env, timeout time.Duration) (res FleetResult, err error) {
	res.FleetRun = r
	rn, err := startRun(ctx, e, stack.Options{ServingStandIn: true, TemporalCluster: true, Log: e.log, WorkerEnv: Run{}.workerEnv()})
	if err != nil {
		return res, err
	}
	defer func() { rn.close(err != nil) }()
	stk, tc, ready := rn.stk, rn.tc, rn.ready

	svcNames := names("n", r.Rollouts)
	setupStart := time.Now()
	svcs := stk.Serving.ServingV1().Services(stack.Namespace)
	if err := forEach(ctx, svcNames, func(ctx context.Context, name string) error {
		svc := service(name)
		// As Knative's webhook would default it (no webhook runs here).
		svc.Spec.Traffic = []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}}
		_, err := svcs.Create(ctx, svc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return res, fmt.Errorf("create Services: %w", err)
	}
	if err := waitReady(ready, svcNames, "00001", timeout); err != nil {
		return res, err
	}
	res.SetupSeconds = round(time.Since(setupStart).Seconds(), 1)
	e.log.Info("bench-fleet: services ready", "services", r.Rollouts, "took", time.Since(setupStart).Round(time.Second))

	workerPids, receiverPid, err := rn.workers(ctx, r.Workers)
	if err != nil {
		return res, err
	}
	temporalPids := stk.TemporalPids()
	before := snapshot(ctx, stk, workerPids, receiverPid)
	temporal0 := treeCPU(temporalPids)
	cpu0 := cpuByProcess(stk)
	res.WorkerRSSBeforeMiB = round(rssKiB(workerPids)/1024, 1)
	plan := Run{Steps: r.Steps, Hold: r.Hold}
	t0 := time.Now()
	if err := forEach(ctx, svcNames, func(ctx context.Context, name string) error {
		return trigger(ctx, stk, name, plan)
	}); err != nil {
		return res, err
	}
	e.log.Info("bench-fleet: triggered", "rollouts", r.Rollouts, "took", time.Since(t0).Round(time.Second))
	closed, err := watchFleet(ctx, tc, r.Rollouts, t0, workerPids, timeout, &res, e)
	if err != nil {
		return res, err
	}
	t1 := time.Now()
	after := snapshot(ctx, stk, workerPids, receiverPid)
	res.CPUByProcess, res.cpuLine = cpuUsed(cpu0, cpuByProcess(stk))
	res.TemporalCPUSeconds = round(treeCPU(temporalPids)-temporal0, 1)
	// The window ends at the last close the visibility store reported.
	window := t1.Sub(t0)
	res.WindowSeconds = round(window.Seconds(), 1)
	res.Busy = busy(res.CPUByProcess, window)
	res.PerMinute = round(float64(closed)/window.Minutes(), 1)
	w := footprint(before.worker, after.worker)
	res.WorkerCPUSeconds, res.WorkerPeakRSSMiB = w.CPUSeconds, w.PeakRSSMiB
	res.ReceiverCPUSeconds = footprint(before.receiver, after.receiver).CPUSeconds
	res.WorkerCores = round(w.CPUSeconds/window.Seconds(), 2)
	if closed > 0 {
		res.WorkerCPUPerRollout = round(1000*w.CPUSeconds/float64(closed), 1)
		res.WorkerCPUPerStep = round(1000*w.CPUSeconds/float64(closed*r.Steps), 1)
		res.TemporalCPUPerRollout = round(1000*res.TemporalCPUSeconds/float64(closed), 1)
		res.RolloutsPerCoreMinute = round(60*float64(closed)/w.CPUSeconds, 0)
	}
	res.Throttle = throttle(before.throttle, after.throttle)
	res.ReceiverEvents = receiverLoad(before.receiverTimes, after.receiverTimes)
	// Counted again at the end, each by a query of its own: the closed
	// count of the last sample is older than these, and a difference of
	// counts made at two moments can come out below zero.
	if res.Succeeded, err = countRollouts(ctx, tc, fmt.Sprintf("%s = '%s'", api.AttrOutcome.GetName(), api.OutcomeSucceeded)); err != nil {
		return res, err
	}
	if res.Failed, err = countRollouts(ctx, tc, failedQuery()); err != nil {
		return res, err
	}
	res.Unfinished = max(0, r.Rollouts-res.Succeeded-res.Failed)
	if res.Failed > 0 {
		// The reasons are the report's footnote: a failed list keeps the figures.
		if res.FailedReasons, err = failedReasons(ctx, tc); err != nil {
			res.FailedReasons = []string{err.Error()}
		}
	}

	sample := sampleNames(svcNames, fleetSample)
	hists, err := readHistories(ctx, tc, sample)
	if err != nil {
		return res, err
	}
	res.HistorySample = len(hists)
	res.History, res.Breakdown = historyCost(hists, r.Steps), stepBreakdown(hists, ready)
	res.HistoryBytesPerRollout = round(historyBytes(hists)/float64(max(len(hists), 1)), 0)
	res.StartLag = startLag(hists, ready)
	if res.Failed > 0 || res.Unfinished > 0 {
		return res, fmt.Errorf("%d rollouts failed and %d unfinished of %d", res.Failed, res.Unfinished, r.Rollouts)
	}
	return res, nil
}

// watchFleet samples Temporal's visibility every few seconds until all n
// rollouts have closed or timeout passes, noting the most running at once
// and the workers' memory then. It returns how many closed.
func watchFleet(ctx context.Context, tc client.Client, n int, t0 time.Time, workerPids []int, timeout time.Duration, res *FleetResult, e env) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Second):
		}
		running, err := countRollouts(ctx, tc, "ExecutionStatus = 'Running'")
		if err != nil {
			return 0, err
		}
		closed, err := countRollouts(ctx, tc, "ExecutionStatus != 'Running'")
		if err != nil {
			return 0, err
		}
		if running > res.PeakRunning {
			res.PeakRunning = running
			res.WorkerRSSAtPeakMiB = round(rssKiB(workerPids)/1024, 1)
			res.KiBPerRunning = round((res.WorkerRSSAtPeakMiB-res.WorkerRSSBeforeMiB)*1024/float64(running), 1)
		}
		if res.StartedSeconds == 0 && running+closed >= n {
			res.StartedSeconds = round(time.Since(t0).Seconds(), 1)
			res.StartsPerSecond = round(float64(n)/res.StartedSeconds, 1)
		}
		e.log.Info("bench-fleet: progress", "running", running, "closed", closed, "of", n)
		if closed >= n {
			return closed, nil
		}
		if time.Now().After(deadline) {
			res.Unfinished = n - closed
			return closed, nil
		}
	}
}

// countRollouts counts rollout workflows matching a visibility query.
func countRollouts(ctx context.Context, tc client.Client, query string) (int, error) {
	resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = '%s' AND %s", api.RolloutWorkflow, query),
	})
	if err != nil {
		return 0, fmt.Errorf("count rollouts where %s: %w", query, err)
	}
	return int(resp.GetCount()), nil
}

// failedQuery matches the closed rollouts that did not succeed, those
// that closed with no outcome recorded (a failed workflow) among them.
func failedQuery() string {
	o := api.AttrOutcome.GetName()
	return fmt.Sprintf("ExecutionStatus != 'Running' AND (%s IS NULL OR %s != '%s')", o, o, api.OutcomeSucceeded)
}

// failedShown bounds the failed rollouts whose reasons a run reports.
const failedShown = 10

// failedReasons lists closed rollouts that did not succeed, with their
// results' outcome and reason: a run that counts failures says why.
func failedReasons(ctx context.Context, tc client.Client) ([]string, error) {
	query := fmt.Sprintf("WorkflowType = '%s' AND %s", api.RolloutWorkflow, failedQuery())
	resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: failedShown})
	if err != nil {
		return nil, fmt.Errorf("list rollouts where %s: %w", query, err)
	}
	var out []string
	for _, ex := range resp.GetExecutions() {
		id := ex.GetExecution().GetWorkflowId()
		var result api.Result
		if err := tc.GetWorkflow(ctx, id, ex.GetExecution().GetRunId()).Get(ctx, &result); err != nil {
			out = append(out, id+": "+ex.GetStatus().String()+": "+err.Error())
			continue
		}
		out = append(out, id+": "+string(result.Outcome)+": "+result.Reason)
	}
	return out, nil
}

// rssKiB is the processes' resident memory now (VmRSS), summed.
func rssKiB(pids []int) float64 {
	total := 0.0
	for _, pid := range pids {
		total += procKiB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
	}
	return total
}

// sampleNames picks at most k names spread evenly over the list: early,
// middle and late starters alike.
func sampleNames(all []string, k int) []string {
	if len(all) <= k {
		return all
	}
	out := make([]string, k)
	for i := range out {
		out[i] = all[i*len(all)/k]
	}
	return out
}

// historyBytes is the size of the histories' events as Temporal stores
// them (protobuf), summed.
func historyBytes(hists []history) float64 {
	total := 0
	for _, h := range hists {
		for _, ev := range h.events {
			total += proto.Size(ev)
		}
	}
	return float64(total)
}

// startLag is, per rollout, the candidate Ready → its first traffic write
// started by a worker (the write's patch follows within milliseconds).
func startLag(hists []history, ready *readyLog) Stats {
	var lags []float64
	for _, h := range hists {
		r, ok := ready.get(h.service + "-00002")
		if !ok {
			continue
		}
		if at, ok := firstWriteStarted(h); ok {
			lags = append(lags, ms(at.Sub(r)))
		}
	}
	return stats(lags)
}

// fleetMarkdown renders the fleet report.
func fleetMarkdown(rep FleetReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Fleet run: %d cores (%s), took %s\n\n", rep.Machine.Cores, rep.Machine.CPU, rep.Took)
	b.WriteString("| rollouts | workers | succeeded / failed / unfinished | all started after s (per s) | peak running | window s | per minute | worker CPU s (cores) | worker ms per rollout / step | rollouts per worker core-minute | worker RSS before / at peak MiB (KiB per running) | Temporal CPU s (ms per rollout) | receiver CPU s | actions / events / history KiB per rollout | Ready → first write p50 / p99 ms | step write / decide / dispatch / queue p50 ms (p99) | busy |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		if r.Error != "" && r.WindowSeconds == 0 {
			fmt.Fprintf(&b, "| %d | %d | error: %s |  |  |  |  |  |  |  |  |  |  |  |  |  |  |\n", r.Rollouts, r.Workers, r.Error)
			continue
		}
		bd := r.Breakdown
		fmt.Fprintf(&b, "| %d | %d | %d / %d / %d | %.0f (%.1f) | %d | %.0f | %.1f | %.1f (%.2f) | %.1f / %.1f | %.0f | %.0f / %.0f (%.1f) | %.1f (%.1f) | %.1f | %.1f / %.1f / %.1f | %.0f / %.0f | %.0f / %.0f / %.0f / %.0f (%.0f / %.0f / %.0f / %.0f) | %.2f |\n",
			r.Rollouts, r.Workers, r.Succeeded, r.Failed, r.Unfinished, r.StartedSeconds, r.StartsPerSecond, r.PeakRunning, r.WindowSeconds, r.PerMinute,
			r.WorkerCPUSeconds, r.WorkerCores, r.WorkerCPUPerRollout, r.WorkerCPUPerStep, r.RolloutsPerCoreMinute,
			r.WorkerRSSBeforeMiB, r.WorkerRSSAtPeakMiB, r.KiBPerRunning, r.TemporalCPUSeconds, r.TemporalCPUPerRollout, r.ReceiverCPUSeconds,
			r.History.ActionsPerRollout, r.History.EventsPerRollout, r.HistoryBytesPerRollout/1024, r.StartLag.P50, r.StartLag.P99,
			bd.Write.P50, bd.Decide.P50, bd.Dispatch.P50, bd.Queue.P50, bd.Write.P99, bd.Decide.P99, bd.Dispatch.P99, bd.Queue.P99, r.Busy)
	}
	b.WriteString("\nCPU by process over each window; the first worker's Kubernetes rate limiter; the receiver's events:\n\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "- %d rollouts, %d workers: %s; rate limiter: %d requests, mean wait %.1f ms, %d over 100 ms; receiver:",
			r.Rollouts, r.Workers, r.cpuLine, r.Throttle.Requests, r.Throttle.MeanMS, r.Throttle.Over100)
		for _, typ := range sortedKeys(r.ReceiverEvents) {
			fmt.Fprintf(&b, " %s %d (mean %.1f ms)", typ, r.ReceiverEvents[typ].Events, r.ReceiverEvents[typ].MeanMS)
		}
		b.WriteString("\n")
		for _, why := range r.FailedReasons {
			fmt.Fprintf(&b, "  - did not succeed: %s\n", why)
		}
	}
	return b.String()
}

// firstWriteStarted is when a worker started the rollout's first traffic
// write.
func firstWriteStarted(h history) (time.Time, bool) {
	first := int64(0)
	for _, ev := range h.events {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if first == 0 && ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == api.ActivityApplyTraffic {
				first = ev.GetEventId()
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if first != 0 && ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId() == first {
				return ev.GetEventTime().AsTime(), true
			}
		}
	}
	return time.Time{}, false
}
