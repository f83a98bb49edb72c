package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/test/stack"
)

// TestFleetRun runs the fleet run small, end to end: the Knative stand-in
// under sluice on Temporal's production topology. Every rollout must
// succeed, all at once, and each figure the fleet report gives must have
// been measured, not left at zero.
func TestFleetRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	tools, root, crds := stack.ForTest(ctx, t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := env{tools: tools, root: root, crds: crds, log: log}
	const n = 30
	res, err := measureFleet(ctx, FleetRun{Rollouts: n, Workers: 2, Steps: 2, Hold: 20 * time.Second}, e, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Succeeded != n || res.Failed != 0 || res.Unfinished != 0 {
		t.Fatalf("succeeded %d, failed %d, unfinished %d of %d", res.Succeeded, res.Failed, res.Unfinished, n)
	}
	if res.PeakRunning != n {
		t.Errorf("at most %d of %d rollouts ran at once: the hold should keep all of them running together", res.PeakRunning, n)
	}
	if res.HistorySample != n || res.StartLag.N != n || res.Breakdown.Write.N < n {
		t.Errorf("histories %d, start lags %d, writes %d: want every rollout's (%d)", res.HistorySample, res.StartLag.N, res.Breakdown.Write.N, n)
	}
	for what, v := range map[string]float64{
		"worker CPU": res.WorkerCPUSeconds, "Temporal CPU": res.TemporalCPUSeconds, "actions per rollout": res.History.ActionsPerRollout,
		"history bytes per rollout": res.HistoryBytesPerRollout, "worker RSS at peak": res.WorkerRSSAtPeakMiB,
	} {
		if v <= 0 {
			t.Errorf("%s is %v: not measured", what, v)
		}
	}
}
