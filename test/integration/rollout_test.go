package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/test/eventsink"
	"github.com/sluicehq/sluice/test/historycheck"
	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

const ns = "default"

// stack is a real Temporal dev server with a real sluice worker over a fake
// Knative cluster (the real API server comes with the local stack).
type stack struct {
	t        testing.TB
	temporal client.Client
	k        *knativefake.Cluster
	ctl      *control.Client
	httpAddr string
	address  string
	// receiverMetrics is the registry of the last receiver served.
	receiverMetrics *prometheus.Registry
}

// cli runs the sluice binary against the stack and returns its combined
// output and exit code.
func (s *stack) cli(args ...string) (string, int) {
	s.t.Helper()
	args = append(args, "--address", s.address, "--task-queue", s.ctl.TaskQueue, "--as", "cli@test")
	cmd := exec.Command(sluiceBin, args...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		s.t.Fatalf("run sluice %v: %v", args, err)
	}
	return string(out), 0
}

func startStack(t testing.TB, objs ...runtime.Object) *stack {
	return startStackWith(t, nil, objs...)
}

// startStackWith starts the stack with a progress-event sender for the worker.
func startStackWith(t testing.TB, sender *events.Sender, objs ...runtime.Object) *stack {
	t.Helper()
	opts := temporalServer(t)
	s := startWorker(t, opts, "", sender, objs...)
	// Register the search attributes the way an operator does, twice: the
	// second run must find them all and add nothing.
	added, err := s.ctl.Setup(context.Background(), opts.Namespace)
	if err != nil || len(added) != len(api.SearchAttributes()) {
		t.Fatalf("setup: added %v, %v", added, err)
	}
	if again, err := s.ctl.Setup(context.Background(), opts.Namespace); err != nil || len(again) != 0 {
		t.Fatalf("second setup: added %v, %v", again, err)
	}
	return s
}

// startWorker runs a worker of cluster (empty: the only one) over a fake
// Knative holding objs, on the Temporal server at opts, on its own task
// queue; the stack's control client starts and steers that cluster's
// rollouts.
func startWorker(t testing.TB, opts client.Options, cluster string, sender *events.Sender, objs ...runtime.Object) *stack {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg, metrics := worker.NewRegistry(log, "worker")
	wopts, err := worker.TemporalOptions(log, metrics)
	if err != nil {
		t.Fatal(err)
	}
	wopts.HostPort, wopts.Namespace = opts.HostPort, opts.Namespace
	ctx, cancel := context.WithCancel(context.Background())
	tc, err := worker.DialTemporal(ctx, wopts)
	if err != nil {
		t.Fatal(err)
	}
	k := knativefake.New(objs...)
	// Every workflow change of this tree, unless SLUICE_WORKFLOW_CHANGES
	// says otherwise (to record the shapes of a worker keeping the way back
	// open): the e2e stack's worker runs with the default.
	settings, err := settings.LoadSettings(func(k string) (string, bool) {
		if k == settings.EnvWorkflowChanges {
			if v, ok := os.LookupEnv(k); ok {
				return v, ok
			}
			return settings.ChangesAll, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	settings.Cluster = cluster
	settings.TaskQueue = "sluice-it-" + strings.ReplaceAll(t.Name(), "/", "-")
	if cluster != "" {
		settings.TaskQueue += "-" + cluster
	}
	settings.HTTPAddr = "127.0.0.1:0"
	addr := make(chan string, 1)
	w := &worker.Worker{Settings: settings, Temporal: tc, Serving: k, Events: sender, Log: log, Registry: reg, Templates: analysisTemplates,
		Listening: func(a string) { addr <- a }}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	s := &stack{t: t, temporal: tc, k: k, address: opts.HostPort, ctl: &control.Client{Temporal: tc, TaskQueue: settings.TaskQueue, Cluster: cluster, Identity: "it@test"}}
	select {
	case s.httpAddr = <-addr:
	case err := <-done:
		t.Fatalf("worker stopped at start: %v", err)
	}
	t.Cleanup(func() {
		// Whatever the test asserted, no rollout may have failed a workflow task.
		if failures, err := historycheck.WorkflowTaskFailures(context.Background(), tc, ""); err != nil || len(failures) > 0 {
			t.Errorf("workflow task failures: %v\n%s", err, strings.Join(failures, "\n"))
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
		tc.Close()
	})
	return s
}

func helloService(ann map[string]string) []runtime.Object {
	return []runtime.Object{
		knativefake.Service(ns, "hello", ann,
			knativefake.Target("hello-00001", 100, ""),
			knativefake.Target("hello-00001", 0, "current")),
		knativefake.Revision(ns, "hello", 1, true),
		knativefake.Revision(ns, "hello", 2, true),
	}
}

var hello = knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}

func (s *stack) status() api.Status {
	s.t.Helper()
	st, err := s.ctl.Status(context.Background(), hello)
	if err != nil {
		s.t.Fatalf("status: %v", err)
	}
	return st
}

func (s *stack) liveTraffic() []servingv1.TrafficTarget { return s.service().Spec.Traffic }

// service reads the hello Service.
func (s *stack) service() *servingv1.Service {
	svc, err := s.k.ServingV1().Services(ns).Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return svc
}

// TestRolloutDrivenByUpdates walks a full rollout on a real Temporal server:
// a gate passed with a promote update, a rejected command, the status query,
// and the search attributes a visibility query finds it by.
func TestRolloutDrivenByUpdates(t *testing.T) {
	s := startStack(t, helloService(map[string]string{
		config.AnnotationSteps: "20,50,100", config.AnnotationHold: "1s", config.AnnotationGates: "50",
	})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", "integration test"); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "the rollout to wait at the 50% gate", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseGate
	})
	st := s.status()
	if st.Weight != 20 || st.StepNumber != 2 || st.Stable != "hello-00001" || !st.CandidateReady {
		t.Fatalf("at the gate: weight %d step %d stable %q ready %v", st.Weight, st.StepNumber, st.Stable, st.CandidateReady)
	}
	// No receiver runs here: the rollout's own read found its candidate Ready.
	if st.ReadinessFrom != api.ReadinessFromWatch || st.Told != nil {
		t.Fatalf("readiness from %q, told %+v; want the rollout's own read", st.ReadinessFrom, st.Told)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=80%, hello-00001=0% (tag current), hello-00002=20%" {
		t.Fatalf("traffic at the gate: %s", got)
	}

	// The CLI shows the rollout waiting at the gate, as text and as JSON.
	if out, code := s.cli("status", "hello"); code != 0 || !strings.Contains(out, "AwaitingPromotion — step 2 of 3, candidate at 20%") ||
		!strings.Contains(out, "hello-00001 (stable) -> hello-00002 (candidate, Ready)") {
		t.Fatalf("sluice status: exit %d\n%s", code, out)
	}
	out, code := s.cli("status", "service/hello", "-o", "json")
	var asJSON api.Status
	if code != 0 || json.Unmarshal([]byte(out), &asJSON) != nil || asJSON.Phase != api.PhaseGate || asJSON.Weight != 20 {
		t.Fatalf("sluice status -o json: exit %d\n%s", code, out)
	}

	// A command that makes no sense is refused by the validator, with its reason.
	if out, code := s.cli("resume", "hello"); code != 3 || !strings.Contains(out, "rejected: resume rejected: the rollout is not paused") {
		t.Fatalf("sluice resume when not paused: exit %d\n%s", code, out)
	}
	if out, code := s.cli("promote", "hello", "--reason", "metrics look fine"); code != 0 || !strings.Contains(out, "promoted hello-00002: passed the gate before step 2 of 3 (50%)") {
		t.Fatalf("sluice promote: exit %d\n%s", code, out)
	}

	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00002=100%" {
		t.Fatalf("final traffic: %s", got)
	}
	st = s.status()
	var promote *api.CommandRecord
	for i := range st.Commands {
		if st.Commands[i].Name == api.CommandPromote {
			promote = &st.Commands[i]
		}
	}
	if promote == nil || promote.By != "cli@test" || promote.Reason != "metrics look fine" || promote.Via != "update" {
		t.Fatalf("promote not recorded: %+v", st.Commands)
	}

	// The visibility store finds the rollout by its target and outcome.
	query := fmt.Sprintf("%s = '%s' AND %s = 'Succeeded' AND %s = 'hello-00002'",
		api.AttrTarget.GetName(), api.TargetAttr(hello), api.AttrOutcome.GetName(), api.AttrCandidate.GetName())
	eventually(t, 15*time.Second, "the visibility query to find the rollout", func() bool {
		resp, err := s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		return err == nil && len(resp.Executions) == 1 && resp.Executions[0].Execution.WorkflowId == api.RolloutID(hello)
	})

	// The worker's endpoints answer, and /metrics carries the SDK's metrics.
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": "temporal_"} {
		body := httpGet(t, "http://"+s.httpAddr+path)
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: %.200q does not contain %q", path, body, want)
		}
	}
	recordHistory(t, s.temporal, "rollout-gate-promote.json")
}

// TestAbortRestoresTrafficOnRealServer aborts mid-rollout through an update
// and checks that the pre-rollout traffic, tag included, is back.
func TestAbortRestoresTrafficOnRealServer(t *testing.T) {
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "30,100", config.AnnotationHold: "10m"})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the first step's hold", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseHolding && st.HoldLeftAt > 0
	})
	if _, err := s.ctl.Send(ctx, hello, api.CommandAbort, "error rate up"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeAborted || !strings.Contains(res.Reason, "error rate up") {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=100%, hello-00001=0% (tag current)" {
		t.Fatalf("traffic after abort: %s", got)
	}
	// After the end, commands are refused with a reason, not an internal error.
	_, err = s.ctl.Send(ctx, hello, api.CommandPromote, "")
	var rejected *control.RejectedError
	if !errors.As(err, &rejected) {
		t.Fatalf("promote after the end: %v", err)
	}
	recordHistory(t, s.temporal, "rollout-abort.json")
}

// TestSupersedeContinuesAsNew: a newer Revision arriving mid-rollout
// returns the traffic, ends the run Superseded and continues as new with
// the newer candidate, which then rolls out to the end from the same
// baseline.
func TestSupersedeContinuesAsNew(t *testing.T) {
	// The hold is long enough to be seen on a loaded machine: a 2 s one
	// could pass between two status reads, and the rollout end unsuperseded.
	objs := append(helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "8s"}),
		knativefake.Revision(ns, "hello", 3, true))
	s := startStack(t, objs...)
	ctx := waitCtx(t)
	first, err := s.ctl.Start(ctx, hello, "hello-00002", "")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the first step's hold", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseHolding
	})
	if _, err := s.ctl.Start(ctx, hello, "hello-00003", "a newer build"); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded || res.Candidate != "hello-00003" {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00003=100%" {
		t.Fatalf("final traffic: %s", got)
	}
	if st := s.status(); len(st.Superseded) != 1 || st.Superseded[0] != "hello-00002" || st.Runs < 2 {
		t.Fatalf("carried state: superseded %v, runs %d", st.Superseded, st.Runs)
	}
	recordRun(t, s.temporal, first, "rollout-supersede.json")
	recordHistory(t, s.temporal, "rollout-continued.json")
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// recordHistory writes the rollout's history as JSON into
// $SLUICE_RECORD_HISTORY/name, for the replay tests in workflows/testdata.
func recordHistory(t testing.TB, c client.Client, name string) {
	recordRun(t, c, "", name)
}

// recordRun is recordHistory of one run ("" for the latest).
func recordRun(t testing.TB, c client.Client, runID, name string) {
	recordWorkflow(t, c, api.RolloutID(hello), runID, name)
}

// recordWorkflow is recordRun of any workflow.
func recordWorkflow(t testing.TB, c client.Client, id, runID, name string) {
	dir := os.Getenv("SLUICE_RECORD_HISTORY")
	if dir == "" {
		return
	}
	it := c.GetWorkflowHistory(context.Background(), id, runID, false, 0)
	var events []json.RawMessage
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, err := protojsonMarshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, b)
	}
	out, _ := json.MarshalIndent(map[string]any{"events": events}, "", "  ")
	if err := os.WriteFile(dir+"/"+name, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedPolicyOnRealServer: a policy with a key sluice does not know
// (a misspelt gate) is refused before any traffic moves; the rollout ends
// Failed with the message, told in a progress event.
func TestRefusedPolicyOnRealServer(t *testing.T) {
	snk := eventsink.New(t)
	sender, err := events.NewSender(snk.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startStackWith(t, sender, helloService(map[string]string{config.AnnotationSteps: "50,100", "sluice.dev/gate": "100"})...)
	ctx := waitCtx(t)
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	want := "did you mean sluice.dev/gates?"
	if err != nil || res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, want) {
		t.Fatalf("result: %+v, %v", res, err)
	}
	eventually(t, 10*time.Second, "the failed event at the sink", func() bool { return snk.Has(events.ProgressFailed) })
	if snk.Has(events.ProgressStarted) || snk.Has(events.ProgressStep) {
		t.Fatal("a refused rollout sent started or step events")
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=100%, hello-00001=0% (tag current)" {
		t.Fatalf("traffic after the refusal: %s", got)
	}
	if !strings.Contains(res.Reason, "then `sluice retry hello` rolls hello-00002 out") {
		t.Fatalf("the reason does not say how to go on: %s", res.Reason)
	}
	recordHistory(t, s.temporal, "rollout-refused.json")
}

// TestRolloutWithGzipToTemporal: sluice talks to Temporal uncompressed by
// default (every other test here); with SLUICE_TEMPORAL_COMPRESSION=gzip a
// rollout runs as well, through the real server.
func TestRolloutWithGzipToTemporal(t *testing.T) {
	t.Setenv(worker.EnvTemporalCompression, "gzip")
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1s"})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); !strings.Contains(got, "hello-00002=100%") {
		t.Fatalf("traffic after the rollout: %s", got)
	}
}
