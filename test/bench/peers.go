package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/test/stack"
)

// The plan both tools run in the side-by-side benchmark: Flagger's Knative
// provider moves the canary through stepWeights on its analysis interval
// (10 s is its minimum), then promotes it to 100%; sluice takes the same
// weights with the same holds, readiness only, no analysis.
var (
	peerWeights = []int64{10, 20, 30, 40, 50}
	peerHold    = 10 * time.Second
)

// flaggerTool is where Flagger's binary and its module (its manifests) are.
type flaggerTool struct{ bin, dir string }

// PeerFigures are one tool's figures at one level, measured by the same
// code from the API server's audit log and /proc.
type PeerFigures struct {
	Tool string `json:"tool"`
	// Shape is how sluice ran: "worker+receiver" or "controller".
	Shape      string `json:"shape,omitempty"`
	Services   int    `json:"services"`
	Unfinished int    `json:"unfinished"`
	Failed     int    `json:"failed"`
	// Trigger: the candidate Revision Ready → the tool's first traffic
	// write giving it a share.
	Trigger Stats `json:"ready_to_first_traffic_ms"`
	// StepOverhead: the time between two traffic writes, less the hold.
	StepOverhead Stats `json:"step_overhead_ms"`
	// DeployTo100: the template change → the write giving the candidate
	// all the traffic.
	DeployTo100 Stats `json:"deploy_to_100_ms"`
	// Reads and writes per step: the tool's API-server requests while its
	// rollouts ran (Knative's kinds and Flagger's Canaries), over
	// services × steps.
	ReadsPerStep  float64 `json:"reads_per_step"`
	WritesPerStep float64 `json:"writes_per_step"`
	// The tool's processes: sluice's worker and receiver (its Temporal dev
	// server apart), Flagger's one process.
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// PeakPSSMiB is the most proportional set size the tool's processes
	// held together, sampled each second: pages they share (sluice's two
	// processes run one binary) counted once, as the node holds them.
	PeakPSSMiB float64 `json:"peak_pss_mib"`
	// The resident memory at the window's end, split: the processes' own
	// (anonymous) and their binaries' pages (file-backed).
	AnonMiB float64 `json:"rss_anon_mib_at_end"`
	FileMiB float64 `json:"rss_file_mib_at_end"`
	// TemporalCPUSeconds is the Temporal dev server's CPU while sluice's
	// rollouts ran: what sluice's durability costs on the side.
	TemporalCPUSeconds float64 `json:"temporal_cpu_seconds,omitempty"`
	// CPUByProcess is what every process of the stack used while this
	// tool's rollouts ran: which resource saturates first.
	CPUByProcess map[string]float64 `json:"cpu_by_process_seconds,omitempty"`
	cpuLine      string
	// WindowSeconds is how long the tool's rollouts ran, from the first
	// deploy to the last end.
	WindowSeconds float64 `json:"window_seconds"`
	// Breakdown splits sluice's step gaps into their parts.
	Breakdown *StepBreakdown `json:"step_breakdown,omitempty"`
	// Throttle: sluice's worker's waits in its Kubernetes rate limiter.
	Throttle *Throttle `json:"kube_rate_limiter,omitempty"`
}

var canaries = schema.GroupVersionResource{Group: "flagger.app", Version: "v1beta1", Resource: "canaries"}

// measurePeers runs sluice and Flagger on one fresh stack, n Services each,
// one tool after the other, and measures both the same way.
func measurePeers(ctx context.Context, n int, e env, fl flaggerTool) ([]PeerFigures, error) {
	opts := stack.Options{Audit: true, Log: e.log, TemporalInMemory: *inMemory, Controller: *peersController,
		WorkerEnv: []string{settings.EnvWorkflowChanges + "=" + *workflowChanges}}
	if *profileDir != "" {
		opts.WorkerEnv = append(opts.WorkerEnv, settings.EnvPprof+"=true")
		opts.ReceiverEnv = append(opts.ReceiverEnv, settings.EnvPprof+"=true")
	}
	rn, err := startRun(ctx, e, opts)
	if err != nil {
		return nil, err
	}
	defer rn.close(false)
	stk, tc, ready := rn.stk, rn.tc, rn.ready
	flaggerPid, err := stk.StartFlagger(ctx, fl.bin, fl.dir)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(stk.Rest)
	if err != nil {
		return nil, err
	}

	sNames, gNames, fNames := names("s", n), names("g", n), names("f", n)
	all := append(append(append([]string{}, sNames...), gNames...), fNames...)
	svcs := stk.Serving.ServingV1().Services(stack.Namespace)
	if err := forEach(ctx, all, func(ctx context.Context, name string) error {
		_, err := svcs.Create(ctx, service(name), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create Services: %w", err)
	}
	if err := waitReady(ready, all, "00001", e.timeout); err != nil {
		return nil, err
	}
	if err := forEach(ctx, gNames, func(ctx context.Context, name string) error {
		_, err := dyn.Resource(canaries).Namespace(stack.Namespace).Create(ctx, canary(name), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create Canaries: %w", err)
	}
	if _, err := waitCanaries(ctx, dyn, gNames, "Initialized", e.timeout); err != nil {
		return nil, err
	}
	e.log.Info("bench-peers: services ready", "services", 3*n)

	deployed := &readyLog{at: map[string]time.Time{}}
	change := func(plan map[string]string) func(context.Context, string) error {
		return func(ctx context.Context, name string) error {
			body := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []map[string]string{{"image": imageV2}}}}}}
			if plan != nil {
				body["metadata"] = map[string]any{"annotations": plan}
			}
			patch, _ := json.Marshal(body)
			deployed.set(name, time.Now())
			_, err := svcs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}
	}
	var steps []string
	for _, w := range peerWeights {
		steps = append(steps, fmt.Sprint(w))
	}
	workerPid, receiverPid := stk.Pids()
	temporalPids := stk.TemporalPids()

	// sluice
	before := []procSample{sample(workerPid), sample(receiverPid), {cpu: treeCPU(temporalPids)}}
	sAll := cpuByProcess(stk)
	workerMetrics := func() map[string]float64 {
		return scrape(ctx, "http://"+stk.WorkerHTTP+"/metrics", "", "sluice_kube_rate_limiter_wait_seconds_")
	}
	waits0 := workerMetrics()
	sPSS := peakPSS([]int{workerPid, receiverPid}, time.Second)
	profiled := map[string]string{"worker": "http://" + stk.WorkerHTTP + "/debug/pprof/", "receiver": stk.ReceiverURL + "debug/pprof/"}
	if *peersController {
		// One process: a second CPU profile of it cannot start.
		profiled = map[string]string{"controller": "http://" + stk.WorkerHTTP + "/debug/pprof/"}
	}
	stopProfiles := profiles(ctx, e.log, *profileDir, fmt.Sprint(n), profiled)
	s0 := time.Now()
	if err := forEach(ctx, sNames, change(map[string]string{"sluice.dev/rollout": "enabled",
		"sluice.dev/steps": strings.Join(append(steps, "100"), ","), "sluice.dev/hold": peerHold.String()})); err != nil {
		return nil, err
	}
	ends, err := waitRollouts(ctx, tc, sNames, e.timeout)
	sUnfinished := 0
	if late, ok := err.(*unfinishedError); ok {
		sUnfinished = late.n
	} else if err != nil {
		return nil, err
	}
	s1 := time.Now()
	after := []procSample{sample(workerPid), sample(receiverPid), {cpu: treeCPU(temporalPids)}}
	sPeakPSS := sPSS()
	stopProfiles()
	sCPU, sCPULine := cpuUsed(sAll, cpuByProcess(stk))
	waits := throttle(waits0, workerMetrics())
	hists, err := readHistories(ctx, tc, sNames)
	if err != nil {
		return nil, err
	}
	breakdown := stepBreakdown(hists, ready)
	sFailed := 0
	for _, end := range ends {
		if end.outcome != "Succeeded" {
			sFailed++
			e.log.Warn("bench-peers: a sluice rollout did not succeed", "service", end.name, "outcome", end.outcome, "reason", end.reason)
		}
	}

	stepsPer := len(peerWeights) + 1
	sluiceFigures := func(audit []auditEvent) PeerFigures {
		s := peerFigures("sluice", audit, []string{workerUser, receiverUser}, workerUser, s0, s1, ready, deployed, n, stepsPer)
		s.Shape = "worker+receiver"
		if *peersController {
			s.Shape = "controller"
		}
		s.Unfinished, s.Failed = sUnfinished, sFailed
		s.CPUSeconds = round(after[0].cpu-before[0].cpu+after[1].cpu-before[1].cpu, 2)
		s.PeakRSSMiB = round((after[0].hwmKiB+after[1].hwmKiB)/1024, 1)
		s.PeakPSSMiB = round(sPeakPSS/1024, 1)
		s.AnonMiB, s.FileMiB = round((after[0].anonKiB+after[1].anonKiB)/1024, 1), round((after[0].fileKiB+after[1].fileKiB)/1024, 1)
		s.TemporalCPUSeconds = round(after[2].cpu-before[2].cpu, 2)
		breakdown.withAudit(audit, workerUser, s0, s1)
		s.CPUByProcess, s.cpuLine, s.Breakdown, s.WindowSeconds, s.Throttle = sCPU, sCPULine, &breakdown, round(s1.Sub(s0).Seconds(), 1), &waits
		return s
	}
	if *sluiceOnly {
		stk.Stop() // flushes the audit log
		audit, err := readAudit(stk.AuditLog)
		if err != nil {
			return nil, err
		}
		return []PeerFigures{sluiceFigures(audit)}, nil
	}

	// Flagger
	fBefore := sample(flaggerPid)
	fPSS := peakPSS([]int{flaggerPid}, time.Second)
	fAll := cpuByProcess(stk)
	f0 := time.Now()
	if err := forEach(ctx, gNames, change(nil)); err != nil {
		return nil, err
	}
	fUnfinished, err := waitCanaries(ctx, dyn, gNames, "Succeeded", e.timeout)
	if err != nil {
		return nil, err
	}
	f1 := time.Now()
	fAfter := sample(flaggerPid)
	fPeakPSS := fPSS()
	fCPU, fCPULine := cpuUsed(fAll, cpuByProcess(stk))

	// sluice's floor: the same plan by a plain client-go loop.
	var floorErr error
	l0 := time.Now()
	if err := floor(ctx, stk, fNames, floorPlan{weights: append(append([]int64{}, peerWeights...), 100), hold: peerHold,
		ready: ready, deployed: deployed, timeout: e.timeout}); err != nil {
		floorErr = err
		e.log.Warn("bench-peers: floor loop failed", "error", err)
	}
	l1 := time.Now()

	stk.Stop() // flushes the audit log
	audit, err := readAudit(stk.AuditLog)
	if err != nil {
		return nil, err
	}
	s := sluiceFigures(audit)
	f := peerFigures("Flagger", audit, []string{stack.FlaggerUser}, stack.FlaggerUser, f0, f1, ready, deployed, n, stepsPer)
	f.Unfinished = fUnfinished
	f.CPUSeconds = round(fAfter.cpu-fBefore.cpu, 2)
	f.PeakRSSMiB = round(fAfter.hwmKiB/1024, 1)
	f.PeakPSSMiB = round(fPeakPSS/1024, 1)
	f.AnonMiB, f.FileMiB = round(fAfter.anonKiB/1024, 1), round(fAfter.fileKiB/1024, 1)
	f.CPUByProcess, f.cpuLine, f.WindowSeconds = fCPU, fCPULine, round(f1.Sub(f0).Seconds(), 1)
	floorFig := peerFigures(floorTool, audit, []string{"admin"}, "admin", l0, l1, ready, deployed, n, stepsPer)
	if floorErr != nil {
		floorFig.Failed = 1
	}
	floorFig.WindowSeconds = round(l1.Sub(l0).Seconds(), 1)
	return []PeerFigures{s, f, floorFig}, nil
}

// canary is a Flagger Canary for a Knative Service: the peers' plan,
// readiness only (no metric checks).
func canary(name string) *unstructured.Unstructured {
	weights := make([]any, len(peerWeights))
	for i, w := range peerWeights {
		weights[i] = w
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flagger.app/v1beta1", "kind": "Canary",
		"metadata": map[string]any{"name": name, "namespace": stack.Namespace},
		"spec": map[string]any{
			"provider":                "knative",
			"targetRef":               map[string]any{"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": name},
			"progressDeadlineSeconds": int64(600),
			"analysis":                map[string]any{"interval": peerHold.String(), "threshold": int64(5), "stepWeights": weights},
		},
	}}
}

// waitCanaries waits until every Canary's phase is phase (or Failed), and
// reports how many were not there in time.
func waitCanaries(ctx context.Context, dyn dynamic.Interface, list []string, phase string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := dyn.Resource(canaries).Namespace(stack.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, fmt.Errorf("list Canaries: %w", err)
		}
		at := map[string]string{}
		for _, c := range l.Items {
			p, _, _ := unstructured.NestedString(c.Object, "status", "phase")
			at[c.GetName()] = p
		}
		pending := 0
		for _, n := range list {
			if at[n] != phase {
				if at[n] == "Failed" {
					return 0, fmt.Errorf("Canary %s failed", n)
				}
				pending++
			}
		}
		if pending == 0 {
			return 0, nil
		}
		if time.Now().After(deadline) {
			if phase == "Initialized" {
				return pending, fmt.Errorf("%d of %d Canaries not %s after %s", pending, len(list), phase, timeout)
			}
			return pending, nil
		}
		time.Sleep(time.Second)
	}
}

// peerFigures reads one tool's figures from the audit log: its traffic
// writes by writer, its requests by users, in [from, to].
func peerFigures(tool string, audit []auditEvent, users []string, writer string, from, to time.Time, ready, deployed *readyLog, n, steps int) PeerFigures {
	f := PeerFigures{Tool: tool, Services: n}
	writes := stepPatches(audit, writer, from, to)
	var trig, full []float64
	for name, ts := range writes {
		if at, ok := ready.get(name + "-00002"); ok && len(ts) > 0 {
			trig = append(trig, ms(ts[0].Sub(at)))
		}
		if at, ok := deployed.get(name); ok && len(ts) > 0 {
			full = append(full, ms(ts[len(ts)-1].Sub(at)))
		}
	}
	f.Trigger, f.StepOverhead, f.DeployTo100 = stats(trig), stats(gaps(writes, peerHold)), stats(full)
	by := map[string]bool{}
	for _, u := range users {
		by[u] = true
	}
	var reads, wr int
	for _, e := range audit {
		if !by[e.User.Username] || e.Received.Before(from) || e.Received.After(to) {
			continue
		}
		switch e.Verb {
		case "get", "list", "watch":
			reads++
		case "patch", "update", "create", "delete":
			wr++
		}
	}
	f.ReadsPerStep = round(float64(reads)/float64(n*steps), 2)
	f.WritesPerStep = round(float64(wr)/float64(n*steps), 2)
	return f
}

// peersMarkdown renders the side-by-side table, with sluice's ratio to
// Flagger per figure (below 1: sluice is ahead).
func peersMarkdown(all [][]PeerFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice and Flagger %s (knative provider), side by side: steps %v then 100%%, %s holds, readiness only\n\n", flaggerVersion, peerWeights, peerHold)
	b.WriteString("| services | tool | unfinished / failed | Ready → first traffic p50 / p99 ms | step overhead p50 / p99 ms | deploy → 100% p50 / p99 s | reads / writes per step | CPU s | peak RSS / PSS MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, level := range all {
		for _, f := range level {
			cpu, rss := fmt.Sprintf("%.1f", f.CPUSeconds), fmt.Sprintf("%.0f / %.0f", f.PeakRSSMiB, f.PeakPSSMiB)
			if f.TemporalCPUSeconds > 0 {
				cpu += fmt.Sprintf(" (+ Temporal %.1f)", f.TemporalCPUSeconds)
			}
			requests := fmt.Sprintf("%.2f / %.2f", f.ReadsPerStep, f.WritesPerStep)
			if f.Tool == floorTool {
				// The bench's stand-ins write as the same account.
				cpu, rss, requests = "(in the bench)", "-", "-"
			}
			tool := f.Tool
			if f.Shape != "" {
				tool += " (" + f.Shape + ")"
			}
			fmt.Fprintf(&b, "| %d | %s | %d / %d | %.0f / %.0f | %.0f / %.0f | %.1f / %.1f | %s | %s | %s |\n", f.Services, tool, f.Unfinished, f.Failed,
				f.Trigger.P50, f.Trigger.P99, f.StepOverhead.P50, f.StepOverhead.P99, f.DeployTo100.P50/1000, f.DeployTo100.P99/1000,
				requests, cpu, rss)
		}
	}
	b.WriteString("\nRatios, sluice / Flagger, in the same run (below 1: sluice is ahead)\n\n")
	b.WriteString("| services | Ready → first traffic p50 / p99 | step overhead p50 / p99 | deploy → 100% p50 / p99 | reads / writes per step | CPU | peak RSS / PSS | sluice's step overhead / the floor's, p50 / p99 |\n|---|---|---|---|---|---|---|---|\n")
	for _, level := range all {
		if len(level) < 2 {
			continue
		}
		s, f := level[0], level[1]
		r := func(a, b float64) string {
			if b == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3g", a/b)
		}
		vsFloor := "-"
		if len(level) > 2 {
			vsFloor = r(s.StepOverhead.P50, level[2].StepOverhead.P50) + " / " + r(s.StepOverhead.P99, level[2].StepOverhead.P99)
		}
		fmt.Fprintf(&b, "| %d | %s / %s | %s / %s | %s / %s | %s / %s | %s | %s / %s | %s |\n", s.Services,
			r(s.Trigger.P50, f.Trigger.P50), r(s.Trigger.P99, f.Trigger.P99), r(s.StepOverhead.P50, f.StepOverhead.P50), r(s.StepOverhead.P99, f.StepOverhead.P99),
			r(s.DeployTo100.P50, f.DeployTo100.P50), r(s.DeployTo100.P99, f.DeployTo100.P99), r(s.ReadsPerStep, f.ReadsPerStep), r(s.WritesPerStep, f.WritesPerStep),
			r(s.CPUSeconds, f.CPUSeconds), r(s.PeakRSSMiB, f.PeakRSSMiB), r(s.PeakPSSMiB, f.PeakPSSMiB), vsFloor)
	}
	b.WriteString("\nWhere the time went: each process's CPU seconds while the tool's rollouts ran, and sluice's step gaps split by its histories (ms, p50 / p99)\n\n")
	for _, level := range all {
		for _, f := range level {
			if f.CPUByProcess == nil {
				continue
			}
			fmt.Fprintf(&b, "- %d, %s: busy %.0f%% over %.0f s: %s\n", f.Services, f.Tool, busy(f.CPUByProcess, time.Duration(f.WindowSeconds*float64(time.Second)))*100, f.WindowSeconds, f.cpuLine)
			if f.AnonMiB > 0 {
				fmt.Fprintf(&b, "  - resident at the end: %.0f MiB its own (anonymous), %.0f MiB of its binary's pages (file-backed)\n", f.AnonMiB, f.FileMiB)
			}
			if t := f.Throttle; t != nil {
				fmt.Fprintf(&b, "  - the worker's Kubernetes rate limiter: %d requests, mean wait %.2f ms, %d waited over 100 ms\n", t.Requests, t.MeanMS, t.Over100)
			}
			if d := f.Breakdown; d != nil {
				b.WriteString(d.text())
			}
		}
	}
	return b.String()
}

// floorTool names the floor's row: a plain client-go loop in the bench's
// process (its CPU is not told apart from the bench's).
const floorTool = "floor (client-go loop)"

// flaggerVersion is the Flagger measured: keep in step with
// test/tools/flagger/go.mod.
const flaggerVersion = "v1.44.0"

// runPeers measures each level on a fresh stack, prints the tables and
// writes JSON to $BENCH_OUT (default bench-peers.json); it returns the exit
// code.
func runPeers(levels string, e env, fl flaggerTool) int {
	if fl.bin == "" || fl.dir == "" {
		fmt.Fprintln(os.Stderr, "bench-peers: FLAGGER_BIN and FLAGGER_DIR must name Flagger's binary and module (make bench-peers sets them)")
		return 2
	}
	runs, err := parseRuns(levels, "", "", "", 1, peerHold)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers:", err)
		return 2
	}
	began := time.Now()
	var all [][]PeerFigures
	code := 0
	for _, r := range runs {
		e.log.Info("bench-peers: level", "services", r.Rollouts)
		figs, err := measurePeers(context.Background(), r.Rollouts, e, fl)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-peers: %d services: %v\n", r.Rollouts, err)
			code = 1
			continue
		}
		all = append(all, figs)
	}
	fmt.Print(peersMarkdown(all))
	fmt.Printf("\n(took %s on %d cores)\n", time.Since(began).Round(time.Second), machine().Cores)
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "bench-peers.json"
	}
	b, _ := json.MarshalIndent(map[string]any{"machine": machine(), "started": began.UTC(), "levels": all}, "", "  ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peers:", err)
		return 1
	}
	return code
}
