package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	sluicesettings "github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/test/eventsink"
	"github.com/sluicehq/sluice/test/historycheck"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/workflows/control"
)

// settings of a run: SLUICE_CHAOS=short is the run `make test` makes (a
// fixed seed, a few minutes), SLUICE_CHAOS=long the one `make chaos` makes
// (a new seed each time); CHAOS_SEED, CHAOS_ROLLOUTS and CHAOS_PARALLEL
// override either.
type settings struct {
	seed               uint64
	rollouts, parallel int
}

func readSettings(mode string) (settings, error) {
	s := settings{seed: 20261204, rollouts: 24, parallel: 4}
	if mode == "long" {
		s = settings{seed: uint64(time.Now().UnixNano()) % 1_000_000, rollouts: 120, parallel: 6}
	}
	for _, v := range []struct {
		name string
		into func(uint64)
	}{
		{"CHAOS_SEED", func(n uint64) { s.seed = n }},
		{"CHAOS_ROLLOUTS", func(n uint64) { s.rollouts = int(n) }},
		{"CHAOS_PARALLEL", func(n uint64) { s.parallel = int(n) }},
	} {
		if raw := os.Getenv(v.name); raw != "" {
			n, err := strconv.ParseUint(raw, 10, 64)
			if err != nil || n == 0 {
				return s, fmt.Errorf("%s=%q: want a whole number above 0", v.name, raw)
			}
			v.into(n)
		}
	}
	return s, nil
}

func TestChaos(t *testing.T) {
	mode := os.Getenv("SLUICE_CHAOS")
	if mode == "" {
		t.Skip("SLUICE_CHAOS is unset: `make test` runs the short chaos run, `make chaos` the long one")
	}
	cfg, err := readSettings(mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos: seed %d (CHAOS_SEED=%d replays it), %d rollouts, %d at a time", cfg.seed, cfg.seed, cfg.rollouts, cfg.parallel)
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	startCtx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	crds, err := stack.KnativeCRDDirs(startCtx, root)
	if err != nil {
		t.Fatal(err)
	}
	nw, err := startNetwork(cfg.seed)
	if err != nil {
		t.Fatal(err)
	}
	defer nw.close()
	sink, stopSink := eventsink.Start()
	defer stopSink()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stk, err := stack.Start(startCtx, stack.Options{
		Dir: dir, Tools: tools, Root: root, CRDDirs: crds, DeployDir: filepath.Join(root, "config", "deploy"),
		Adapter: true, ProgressSink: sink.URL, Audit: true, AuditBlocking: true, AuditPods: true, Prometheus: true, Via: nw.via, Log: log,
		// Every workflow change of this tree: progress events from local
		// activities among them, which the run shows lose and reorder none.
		WorkerEnv: []string{sluicesettings.EnvWorkflowChanges + "=" + sluicesettings.ChangesAll},
	})
	if errors.Is(err, stack.ErrNeedsRoot) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	failed := true
	defer func() {
		if failed {
			t.Log(stk.Logs())
			keepLogs(t, dir)
		}
		stk.Stop()
	}()
	_, second, err := stk.AddWorker(startCtx)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(client.Options{HostPort: stk.TemporalAddr, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	plainService(t, stk, "bystander")
	plainService(t, stk, probe)

	w := &workload{serving: stk.Serving, ctl: &control.Client{Temporal: tc, TaskQueue: api.DefaultTaskQueue, Identity: "chaos"}, log: log, timeout: 12 * time.Minute}
	w.left.Store(int64(cfg.rollouts))
	in := &injector{stk: stk, net: nw, rng: rand.New(rand.NewPCG(cfg.seed, 1)), workers: []string{stack.Worker, second},
		kinds: faultKinds(stk.TemporalCluster()), log: log}
	// However short the run, each kind of fault meets rollouts.
	w.more = in.untried
	begin := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	var faultErr error
	var touches int
	bg.Go(func() {
		// A fault the stack did not come back from ends the run.
		if faultErr = in.run(ctx); faultErr != nil {
			stop()
		}
	})
	var names []string
	for i := range cfg.parallel {
		names = append(names, fmt.Sprintf("c%d", i))
	}
	bg.Go(func() { touches = w.touch(ctx, names, rand.New(rand.NewPCG(cfg.seed, 2))) })
	nw.events.set(true)
	var drivers sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		drivers.Go(func() { errs[i] = w.drive(ctx, name, rand.New(rand.NewPCG(cfg.seed, uint64(10+i)))) })
	}
	drivers.Wait()
	stop()
	bg.Wait()
	nw.events.set(false)
	took := time.Since(begin)
	if err := errors.Join(append(errs, faultErr)...); err != nil {
		t.Fatalf("seed %d: %v", cfg.seed, err)
	}

	// The evidence, once every fault is over.
	readCtx, cancelRead := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelRead()
	aud, err := readAudit(stk.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := readRuns(readCtx, tc)
	if err != nil {
		t.Fatal(err)
	}
	traffic, err := readTraffic(readCtx, stk.Serving)
	if err != nil {
		t.Fatal(err)
	}
	expects := w.Expects()
	writes := aud.Writes
	ev := evidence{Writes: writes, Ready: aud.Ready, Pods: aud.Pods, Counted: aud.Counted, Bounded: aud.Bounded, Faults: in.Faults(), Runs: runs, Progress: sink.Events(), Traffic: traffic, Bystanders: []string{"bystander"},
		Trail: nw.events.Trail}
	violations := check(expects, ev)
	taskFailures, err := historycheck.WorkflowTaskFailures(readCtx, tc, "")
	if err != nil {
		t.Fatal(err)
	}
	var transport []string
	for _, f := range taskFailures {
		// The worker read a history cut short by a fault of its link to
		// Temporal: the SDK fails that task and Temporal gives it again.
		// Not the workflow's doing, and not an outcome; listed apart.
		if strings.Contains(f, "premature end of stream") {
			transport = append(transport, f)
			continue
		}
		violations = append(violations, violation{"no workflow task fails", "", f})
	}
	onTemporal := "the Temporal dev server"
	if stk.TemporalCluster() {
		onTemporal = "Temporal's production topology (PostgreSQL, 4 services)"
	}
	sum := summary{Seed: cfg.seed, Kinds: in.kinds, Temporal: onTemporal, Took: took, Rollouts: len(expects), Outcomes: map[string]int{}, Faults: in.Faults(),
		Recovery: recovery(in.Faults(), expects, writes), Events: nw.events.Counts(), Touches: touches, Edits: w.edits,
		Writes: len(writes), Ready: len(aud.Ready), Violations: violations, HistoryCutShort: transport}
	for _, e := range expects {
		sum.Outcomes[e.Plan+" "+string(e.Got)]++
	}
	var b strings.Builder
	sum.print(&b)
	t.Log("\n" + b.String())
	if out := os.Getenv("CHAOS_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if len(expects) < cfg.rollouts {
		t.Errorf("seed %d: %d rollouts made, want %d", cfg.seed, len(expects), cfg.rollouts)
	}
	if len(violations) > 0 {
		t.Errorf("seed %d (CHAOS_SEED=%d replays it): %d invariant violations (listed above)", cfg.seed, cfg.seed, len(violations))
		return
	}
	failed = t.Failed()
}

// plainService makes a Service that has not opted in, and waits until it
// is Ready: the bystander (no rollout may touch it) and the probe.
func plainService(t *testing.T, stk *stack.Stack, name string) {
	t.Helper()
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/" + name + ":v1"}}
	svcs := stk.Serving.ServingV1().Services(ns)
	if _, err := svcs.Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got, err := svcs.Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && got.IsReady() && got.Status.LatestReadyRevisionName != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not Ready after 2m: %v", name, err)
		}
	}
}

// keepLogs copies the stack's logs and audit log into
// $SLUICE_ARTIFACTS/chaos-logs, to be read after a failed run.
func keepLogs(t *testing.T, dir string) {
	out := os.Getenv("SLUICE_ARTIFACTS")
	if out == "" {
		return
	}
	dst := filepath.Join(out, "chaos-logs")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
		}
	}
	t.Log("chaos: the stack's logs are in", dst)
}

type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
