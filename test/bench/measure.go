package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	tlog "go.temporal.io/sdk/log"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/test/eventsink"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

type env struct {
	tools   stack.Tools
	root    string
	crds    []string
	log     *slog.Logger
	timeout time.Duration
}

const (
	workerUser   = "system:serviceaccount:sluice-system:sluice-worker"
	receiverUser = "system:serviceaccount:sluice-system:sluice-receiver"
	imageV1      = "example.com/bench:v1"
	imageV2      = "example.com/bench:v2"
	// parallel bounds the bench's own concurrent API calls while it sets
	// up and triggers: it is the load generator, not the load.
	parallel = 32
)

// readyLog records when each Revision was first seen Ready.
type readyLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (r *readyLog) set(rev string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.at[rev]; !ok {
		r.at[rev] = at
	}
}

func (r *readyLog) get(rev string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[rev]
	return t, ok
}

// workerEnv is the worker's environment beyond the stack's for r.
func (r Run) workerEnv() []string {
	env := []string{settings.EnvWorkflowChanges + "=" + *workflowChanges}
	if r.NoRolloutResources {
		env = append(env, worker.EnvRolloutResources+"=off")
	}
	return env
}

// run is one measured configuration's fresh stack, with the sink of its
// progress events, the log of when each Revision became Ready, and a
// Temporal client.
type run struct {
	stk   *stack.Stack
	tc    client.Client
	sink  *eventsink.Sink
	ready *readyLog
	done  []func()
}

// startRun starts a stack with o, on top of what every measured run has:
// sluice's manifests, the ApiServerSource adapter, progress events to a
// sink and the readiness log.
func startRun(ctx context.Context, e env, o stack.Options) (*run, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return nil, err
	}
	r := &run{ready: &readyLog{at: map[string]time.Time{}}, done: []func(){func() {
		// BENCH_KEEP=1 keeps the stack's logs and audit log for a look.
		if os.Getenv("BENCH_KEEP") != "" {
			e.log.Info("bench: kept the stack's directory", "dir", dir)
			return
		}
		os.RemoveAll(dir)
	}}}
	var stopSink func()
	r.sink, stopSink = eventsink.Start()
	r.done = append(r.done, stopSink)
	o.Dir, o.Tools, o.Root, o.CRDDirs, o.DeployDir = dir, e.tools, e.root, e.crds, filepath.Join(e.root, "config", "deploy")
	o.Adapter, o.ProgressSink, o.OnReady = true, r.sink.URL, r.ready.set
	if r.stk, err = stack.Start(ctx, o); err != nil {
		r.close(false)
		return nil, fmt.Errorf("start the local stack: %w", err)
	}
	r.done = append(r.done, r.stk.Stop)
	if r.tc, err = client.Dial(client.Options{HostPort: r.stk.TemporalAddr, Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))}); err != nil {
		r.close(true)
		return nil, err
	}
	r.done = append(r.done, r.tc.Close)
	return r, nil
}

// workers starts workers beside the stack's own until there are n, and
// returns their pids and the receiver's.
func (r *run) workers(ctx context.Context, n int) (workers []int, receiver int, err error) {
	worker, receiver := r.stk.Pids()
	workers = []int{worker}
	for range n - 1 {
		pid, _, err := r.stk.AddWorker(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("start another worker: %w", err)
		}
		workers = append(workers, pid)
	}
	return workers, receiver, nil
}

// close stops what startRun started, printing the stack's logs first if
// the run failed.
func (r *run) close(failed bool) {
	if failed && r.stk != nil {
		fmt.Fprintln(os.Stderr, r.stk.Logs())
	}
	for i := len(r.done) - 1; i >= 0; i-- {
		r.done[i]()
	}
}

// measure runs one configuration on a fresh stack: set up 2N Services, roll
// out a new Revision on N of them with sluice, then step the other N with
// the floor loop, and read what it cost.
func measure(ctx context.Context, r Run, e env) (res Result, err error) {
	res.Run = r
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rn, err := startRun(ctx, e, stack.Options{Audit: true, Log: quiet, TemporalInMemory: *inMemory, WorkerEnv: r.workerEnv()})
	if err != nil {
		return res, err
	}
	defer func() { rn.close(err != nil) }()
	stk, tc, sink, ready := rn.stk, rn.tc, rn.sink, rn.ready

	sluiceNames, floorNames := names("b", r.Rollouts), names("f", r.Rollouts)
	setupStart := time.Now()
	if err := setup(ctx, stk, sluiceNames, floorNames, ready, e.timeout); err != nil {
		return res, err
	}
	e.log.Info("bench: services ready", "services", 2*r.Rollouts, "took", time.Since(setupStart).Round(time.Millisecond))

	// sluice
	workerPids, receiverPid, err := rn.workers(ctx, r.Workers)
	if err != nil {
		return res, err
	}
	before := snapshot(ctx, stk, workerPids, receiverPid)
	cpu0 := cpuByProcess(stk)
	t0 := time.Now()
	if err := forEach(ctx, sluiceNames, func(ctx context.Context, name string) error {
		return trigger(ctx, stk, name, r)
	}); err != nil {
		return res, err
	}
	ends, err := waitRollouts(ctx, tc, sluiceNames, e.timeout)
	var late *unfinishedError
	switch {
	case errors.As(err, &late):
		// Measure what finished; the rest count against the run.
		res.Unfinished = late.n
		e.log.Warn("bench: rollouts unfinished", "unfinished", late.n, "of", r.Rollouts, "after", e.timeout)
	case err != nil:
		return res, err
	}
	var finished []string
	for _, end := range ends {
		finished = append(finished, end.name)
	}
	t1 := time.Now()
	after := snapshot(ctx, stk, workerPids, receiverPid)
	res.CPUByProcess, res.cpuLine = cpuUsed(cpu0, cpuByProcess(stk))
	res.Busy = busy(res.CPUByProcess, t1.Sub(t0))
	e.log.Info("bench: rollouts done", "rollouts", r.Rollouts, "took", t1.Sub(t0).Round(time.Millisecond))
	res.Readiness = map[string]int{}
	for _, end := range ends {
		if end.readiness != "" {
			res.Readiness[end.readiness]++
		}
		if end.outcome != api.OutcomeSucceeded {
			res.Failed++
			if len(res.FailedReasons) < 5 {
				res.FailedReasons = append(res.FailedReasons, end.name+": "+string(end.outcome)+": "+end.reason)
			}
		}
	}
	last := t0
	for _, end := range ends {
		if end.at.After(last) {
			last = end.at
		}
	}
	res.PerMinute = round(float64(len(ends))/last.Sub(t0).Minutes(), 1)
	res.Worker = footprint(before.worker, after.worker)
	res.Receiver = footprint(before.receiver, after.receiver)
	res.APIByVerb = diffMetrics(before.metrics, after.metrics)
	res.ReceiverEvents = receiverLoad(before.receiverTimes, after.receiverTimes)
	res.Throttle = throttle(before.throttle, after.throttle)
	hists, err := readHistories(ctx, tc, finished)
	if err != nil {
		return res, err
	}
	res.History, res.Breakdown = historyCost(hists, r.Steps), stepBreakdown(hists, ready)
	res.ProgressEvents = len(sink.Events())

	// the floor, on the same stack
	f0 := time.Now()
	if err := floor(ctx, stk, floorNames, floorPlan{weights: weights(r.Steps), hold: r.Hold, ready: ready, timeout: e.timeout}); err != nil {
		// sluice's figures stand; the ratio to the floor does not.
		res.FloorError = err.Error()
		e.log.Warn("bench: floor loop failed", "error", err)
	}
	f1 := time.Now()
	e.log.Info("bench: floor done", "services", r.Rollouts, "took", f1.Sub(f0).Round(time.Millisecond))

	stk.Stop() // flushes the audit log
	audit, err := readAudit(stk.AuditLog)
	if err != nil {
		return res, err
	}
	res.fromAudit(audit, ready, t0, t1, f0, f1)
	if res.FloorError != "" {
		res.Floor, res.RatioP50, res.RatioP99 = Stats{}, 0, 0
	}
	return res, nil
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// forEach runs fn for every name, parallel at most `parallel` at a time, and
// returns the first error.
func forEach(ctx context.Context, list []string, fn func(context.Context, string) error) error {
	sem := make(chan struct{}, parallel)
	errs := make(chan error, len(list))
	var wg sync.WaitGroup
	for _, n := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, n); err != nil {
				errs <- fmt.Errorf("%s: %w", n, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func service(name string) *servingv1.Service {
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: stack.Namespace}}
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: imageV1}}
	return svc
}

// setup creates the Services, waits for their first Revisions, and gives the
// floor's Services their second Revision, pinned at 0%.
func setup(ctx context.Context, stk *stack.Stack, sluiceNames, floorNames []string, ready *readyLog, timeout time.Duration) error {
	all := append(append([]string{}, sluiceNames...), floorNames...)
	svcs := stk.Serving.ServingV1().Services(stack.Namespace)
	if err := forEach(ctx, all, func(ctx context.Context, name string) error {
		_, err := svcs.Create(ctx, service(name), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create Services: %w", err)
	}
	return waitReady(ready, all, "00001", timeout)
}

func waitReady(ready *readyLog, svcs []string, suffix string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		missing := 0
		for _, n := range svcs {
			if _, ok := ready.get(n + "-" + suffix); !ok {
				missing++
			}
		}
		if missing == 0 {
			// Let the Route and Service status catch up with the Revision.
			time.Sleep(2 * time.Second)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Revisions -%s not Ready after %s", missing, len(svcs), suffix, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// weights are the step weights of an n-step rollout: 100/n apart, ending at 100.
func weights(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(100 * (i + 1) / n)
	}
	return out
}

func stepsAnnotation(n int) string {
	var parts []string
	for _, w := range weights(n) {
		parts = append(parts, fmt.Sprint(w))
	}
	return strings.Join(parts, ",")
}

// trigger opts a Service in and deploys its second Revision in one write, as
// a team would with `kubectl apply`.
func trigger(ctx context.Context, stk *stack.Stack, name string, r Run) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{
			"sluice.dev/rollout": "enabled", "sluice.dev/steps": stepsAnnotation(r.Steps), "sluice.dev/hold": r.Hold.String(),
		}},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []map[string]string{{"image": imageV2}}}}},
	})
	_, err := stk.Serving.ServingV1().Services(stack.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

type ended struct {
	name    string
	at      time.Time
	outcome api.Outcome
	reason  string
	// readiness is what told the rollout its candidate was Ready: the
	// Revision's CloudEvent or the rollout's own watch, whichever came
	// first.
	readiness string
}

// waitRollouts waits until every Service's rollout has closed, and reads
// each one's outcome. Each rollout's result is awaited with one long poll
// (the SDK's WorkflowRun.Get, which follows continue-as-new), so the
// Temporal CPU the bench reports is the rollouts' own: describing every
// rollout twice a second, as this did before, added calls the Temporal
// server answered inside the measured window.
func waitRollouts(ctx context.Context, tc client.Client, svcs []string, timeout time.Duration) ([]ended, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	var out []ended
	var errs []error
	var wg sync.WaitGroup
	for _, n := range svcs {
		wg.Go(func() {
			e, err := waitRollout(wctx, tc, n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out = append(out, e)
			case wctx.Err() == nil:
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(out) < len(svcs) {
		return out, &unfinishedError{n: len(svcs) - len(out), of: len(svcs), after: timeout}
	}
	return out, nil
}

// waitRollout waits for one Service's rollout to start, then to close.
func waitRollout(ctx context.Context, tc client.Client, name string) (ended, error) {
	target := knative.TargetRef{Namespace: stack.Namespace, Kind: knative.KindService, Name: name}
	id := api.RolloutID(target)
	for {
		_, err := tc.DescribeWorkflowExecution(ctx, id, "")
		var nf *serviceerror.NotFound
		if err == nil {
			break
		}
		if !errors.As(err, &nf) {
			return ended{}, fmt.Errorf("describe %s: %w", id, err)
		}
		select { // not started yet
		case <-ctx.Done():
			return ended{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	e := ended{name: name}
	var result api.Result
	if err := tc.GetWorkflow(ctx, id, "").Get(ctx, &result); err != nil {
		if ctx.Err() != nil {
			return ended{}, ctx.Err()
		}
		e.outcome, e.reason = "error", err.Error()
	} else {
		e.outcome, e.reason = result.Outcome, result.Reason
	}
	desc, err := tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return ended{}, fmt.Errorf("describe %s: %w", id, err)
	}
	e.at = desc.GetWorkflowExecutionInfo().GetCloseTime().AsTime()
	if st, err := (&control.Client{Temporal: tc}).Status(ctx, target); err == nil {
		e.readiness = st.ReadinessFrom
	}
	return e, nil
}

// unfinishedError: some rollouts were still running when the bench stopped waiting.
type unfinishedError struct {
	n, of int
	after time.Duration
}

func (e *unfinishedError) Error() string {
	return fmt.Sprintf("%d of %d rollouts still running after %s", e.n, e.of, e.after)
}
