// Command bench measures sluice on the local stack with real processes: many
// rollouts at once, each on its own Service, and beside them the floor — a
// plain client-go loop doing the same read-patch-verify on the same stack.
//
//	go run ./test/bench [-rollouts 10,100,500] [-steps 4] [-hold 1s] [-growth 10x8] [-scale-out 100] [-no-rollout-resources 25]
//
// Timings come from the API server's own audit log (when a traffic patch
// arrived) and from a watch of Revisions (when Knative's controller made one
// Ready);
// costs from the rollouts' Temporal histories and the API server's metrics;
// footprint from /proc. It prints a Markdown table and writes JSON to
// $BENCH_OUT (default bench-results.json). Run it with `make bench`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/test/stack"
)

// inMemory is -temporal-in-memory.
var inMemory = new(bool)

// workflowChanges is -workflow-changes: which of this tree's workflow
// changes the measured worker takes (SLUICE_WORKFLOW_CHANGES).
var workflowChanges = new(string)

// sluiceOnly is -peers-sluice-only: the peers' plan for sluice alone, to
// look at its figures without waiting for Flagger's.
var sluiceOnly = new(bool)

// peersController runs sluice as one `sluice controller` process in the
// peers run, as the chart's controller.enabled installs it.
var peersController = new(bool)

// Run is one configuration measured on a fresh stack.
type Run struct {
	Rollouts int           `json:"rollouts"`
	Steps    int           `json:"steps"`
	Hold     time.Duration `json:"hold_ns"`
	// Workers is how many sluice worker processes share the task queue.
	Workers int `json:"workers"`
	// NoRolloutResources runs the worker with its Rollout resources (and
	// their Kubernetes events) turned off: beside the same level with them
	// on, what writing them costs the steps.
	NoRolloutResources bool `json:"no_rollout_resources,omitempty"`
}

// Label names the run in the tables: "100 × 4", "100 × 4, 2 workers".
func (r Run) Label() string {
	l := fmt.Sprintf("%d × %d", r.Rollouts, r.Steps)
	if r.Workers > 1 {
		l += fmt.Sprintf(", %d workers", r.Workers)
	}
	if r.NoRolloutResources {
		l += ", no Rollout resources"
	}
	return l
}

func main() {
	levels := flag.String("rollouts", "1,5,10,25,50,100", "concurrency levels: rollouts at once, each on its own Service (the knee is looked for among them)")
	steps := flag.Int("steps", 4, "steps per rollout at every level")
	hold := flag.Duration("hold", time.Second, "hold of each step")
	growth := flag.String("growth", "10x8", "extra runs to see growth in steps, ROLLOUTSxSTEPS, comma-separated (empty: none)")
	scaleOut := flag.String("scale-out", "100", "levels run again with two worker processes on the same Temporal, comma-separated (empty: none)")
	noResources := flag.String("no-rollout-resources", "", "levels run again with the worker's Rollout resources off (SLUICE_ROLLOUT_RESOURCES=off), to see what they cost the steps, comma-separated (empty: none)")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long one level's rollouts may take")
	peers := flag.String("peers", "", "instead: sluice and Flagger side by side at these levels, e.g. 1,10,100 (FLAGGER_BIN, FLAGGER_DIR: its binary and module)")
	fleet := flag.String("fleet", "", "instead: the fleet run at these levels, e.g. 1000,5000: sluice and Temporal's production topology alone, Knative played by a stand-in (test/servingstandin)")
	fleetWorkers := flag.String("fleet-workers", "1,2", "with -fleet: each level with each of these counts of worker processes")
	fleetSteps := flag.Int("fleet-steps", 2, "with -fleet: steps per rollout")
	fleetHold := flag.Duration("fleet-hold", 2*time.Minute, "with -fleet: hold of each step (long enough that every rollout of a level runs at once)")
	fleetTimeout := flag.Duration("fleet-timeout", 40*time.Minute, "with -fleet: how long one level's rollouts may take")
	flag.BoolVar(sluiceOnly, "peers-sluice-only", false, "with -peers: run sluice's half alone")
	flag.BoolVar(peersController, "peers-controller", false, "with -peers: run sluice as one `sluice controller` process (the chart's controller.enabled) instead of a worker and a receiver")
	flag.StringVar(workflowChanges, "workflow-changes", "all", "the worker's SLUICE_WORKFLOW_CHANGES: all (every workflow change of this tree, what it costs once rollback to the previous release is closed) or compatible (the default of a worker)")
	flag.StringVar(profileDir, "pprof", "", "with -peers: take CPU profiles of sluice's worker and receiver over its window, and their heap and allocations at its end, into this directory")
	flag.BoolVar(inMemory, "temporal-in-memory", true, "keep the Temporal dev server's database in memory (false: a SQLite file, synced to disk on every write)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	runs, err := parseRuns(*levels, *growth, *scaleOut, *noResources, *steps, *hold)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	root, err := stack.RepoRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	crds, err := stack.KnativeCRDDirs(context.Background(), root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}

	e := env{tools: tools, root: root, crds: crds, log: log, timeout: *timeout}
	if *fleet != "" {
		os.Exit(runFleet(*fleet, *fleetWorkers, *fleetSteps, *fleetHold, *fleetTimeout, e))
	}
	if *peers != "" {
		os.Exit(runPeers(*peers, e, flaggerTool{bin: os.Getenv("FLAGGER_BIN"), dir: os.Getenv("FLAGGER_DIR")}))
	}
	began := time.Now()
	report := Report{Machine: machine(), Started: began.UTC()}
	for _, r := range runs {
		log.Info("bench: run", "rollouts", r.Rollouts, "steps", r.Steps, "hold", r.Hold)
		res, err := measure(context.Background(), r, e)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", r.Label(), err)
			res.Error = err.Error()
		}
		report.Results = append(report.Results, res)
	}
	report.Took = time.Since(began).Round(time.Second).String()
	report.Targets = targets(report.Results)

	fmt.Print(report.Markdown())
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "bench-results.json"
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s (took %s)\n", out, report.Took)
	for _, r := range report.Results {
		if r.Error != "" {
			os.Exit(1)
		}
	}
}

func parseRuns(levels, growth, scaleOut, noResources string, steps int, hold time.Duration) ([]Run, error) {
	var runs []Run
	for _, list := range []struct {
		flag, values string
		workers      int
		off          bool
	}{{"-rollouts", levels, 1, false}, {"-scale-out", scaleOut, 2, false}, {"-no-rollout-resources", noResources, 1, true}} {
		if strings.TrimSpace(list.values) == "" && list.flag != "-rollouts" {
			continue
		}
		for _, f := range strings.Split(list.values, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%s: want numbers above 0, got %q", list.flag, f)
			}
			runs = append(runs, Run{Rollouts: n, Steps: steps, Hold: hold, Workers: list.workers, NoRolloutResources: list.off})
		}
	}
	if strings.TrimSpace(growth) == "" {
		return runs, nil
	}
	for _, f := range strings.Split(growth, ",") {
		n, s, ok := strings.Cut(strings.TrimSpace(f), "x")
		rn, err1 := strconv.Atoi(n)
		sn, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || rn < 1 || sn < 1 {
			return nil, fmt.Errorf("-growth: want ROLLOUTSxSTEPS such as 100x8, got %q", f)
		}
		runs = append(runs, Run{Rollouts: rn, Steps: sn, Hold: hold, Workers: 1})
	}
	return runs, nil
}

// Machine is where the figures were measured.
type Machine struct {
	Cores  int    `json:"cores"`
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	CPU    string `json:"cpu,omitempty"`
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
