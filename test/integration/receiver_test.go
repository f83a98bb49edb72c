package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/receiver"
	"github.com/sluicehq/sluice/test/eventsink"
	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/workflows"
	"github.com/sluicehq/sluice/workflows/control"
)

const commandToken = "integration-token-0123456789"

// startReceiver serves sluice's receiver over the stack's Temporal and cluster.
func (s *stack) startReceiver(t testing.TB) string { return s.serveReceiver(t, nil) }

// startCachedReceiver serves it with its informers' caches, as `sluice
// receiver` runs.
func (s *stack) startCachedReceiver(t testing.TB) (string, *knative.TargetCache) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tc, err := knative.NewTargetCache(ctx, knative.Client{Serving: s.k}, []string{ns})
	if err != nil {
		t.Fatal(err)
	}
	return s.serveReceiver(t, tc), tc
}

func (s *stack) serveReceiver(t testing.TB, targets *knative.TargetCache) string {
	s.receiverMetrics = prometheus.NewRegistry()
	tokens := &receiver.StaticTokens{}
	tokens.Add("pipeline", commandToken)
	rcv := &receiver.Receiver{
		Control: s.ctl, Knative: knative.Client{Serving: s.k}, Targets: targets, Auth: tokens, AllowUnauthenticatedSource: true,
		MaxBody: receiver.DefaultMaxBody, Log: slog.New(slog.DiscardHandler),
		Metrics: receiver.NewMetrics(s.receiverMetrics), Seen: receiver.NewSeen(10000, time.Minute),
	}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	return srv.URL
}

// replay posts a recorded ApiServerSource delivery, optionally with a new id.
func replay(t *testing.T, url, name, id string) (int, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "events", "testdata", "apiserversource", name))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(f.Body))
	for k, v := range f.Headers {
		if k != "Host" && k != "Content-Length" {
			req.Header.Set(k, v)
		}
	}
	if id != "" {
		req.Header.Set("Ce-Id", id)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

func postCommand(t *testing.T, url, typ, data, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(data))
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", typ+time.Now().String())
	req.Header.Set("Ce-Source", "/pipelines/it")
	req.Header.Set("Ce-Type", typ)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return do(t, req)
}

// TestEventsDriveARollout: a recorded Revision event starts the rollout
// under the target's workflow ID, a duplicate starts nothing, a readiness
// event reaches the running workflow, commands go through the validators,
// and progress events reach a sink.
func TestEventsDriveARollout(t *testing.T) {
	svc := knativefake.Service(ns, "hello", map[string]string{
		config.AnnotationSteps: "50,100", config.AnnotationHold: "1s", config.AnnotationGates: "100",
	}, knativefake.Target("hello-00001", 100, ""))
	svc.Status.LatestCreatedRevisionName = "hello-00002"
	snk := eventsink.New(t)
	sender, err := events.NewSender(snk.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startStackWith(t, sender, []runtime.Object{svc, knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, false)}...)
	url := s.startReceiver(t)
	ctx := context.Background()

	code, msg := replay(t, url, "resource/02-revision-add.json", "")
	if code != http.StatusAccepted || !strings.Contains(msg, "offered hello-00002 (pending) to the rollout of default/service/hello") {
		t.Fatalf("revision add: %d %s", code, msg)
	}
	desc, err := s.temporal.DescribeWorkflowExecution(ctx, "rollout/default/service/hello", "")
	if err != nil || desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("workflow rollout/default/service/hello: %v, %v", desc, err)
	}
	runID := desc.WorkflowExecutionInfo.Execution.RunId

	// The same delivery again, and the same change re-emitted with a new id.
	if code, msg := replay(t, url, "resource/02-revision-add.json", ""); code != http.StatusOK || !strings.Contains(msg, "duplicate") {
		t.Fatalf("duplicate delivery: %d %s", code, msg)
	}
	// (The rollout already knows the Revision is pending: nothing to tell it.)
	if code, msg := replay(t, url, "resource/02-revision-add.json", "re-emitted-1"); code != http.StatusOK || !strings.Contains(msg, "already acted on default/hello-00002 being pending") {
		t.Fatalf("re-emitted event: %d %s", code, msg)
	}
	resp, err := s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowId = 'rollout/default/service/hello'"})
	if err != nil || len(resp.Executions) != 1 || resp.Executions[0].Execution.RunId != runID {
		t.Fatalf("executions after duplicates: %v, %v", resp, err)
	}

	// Readiness: the Revision turns Ready. The receiver answers at once
	// (it offered this candidate already) and tells the rollout in the
	// background; the rollout acts on the event rather than wait for its
	// own watch's grace, and says so in its status.
	time.Sleep(500 * time.Millisecond)
	if err := s.k.SetRevisionReady(ns, "hello-00002", "True", "", ""); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if code, msg := replay(t, url, "resource/04-revision-update-ready-true.json", ""); code != http.StatusAccepted || !strings.Contains(msg, "offering hello-00002 (ready) to the rollout of default/service/hello") {
		t.Fatalf("ready event: %d %s", code, msg)
	}
	eventually(t, 20*time.Second, "the rollout to reach the gate before 100%", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseGate
	})
	if waited := time.Since(sent); waited > workflows.ReadinessPoll {
		t.Fatalf("the rollout took %s after its candidate turned Ready to reach the gate", waited)
	}
	if st := s.status(); st.Weight != 50 || st.ReadinessFrom != api.ReadinessFromEvent || st.Told == nil || st.Told.By == "" {
		t.Fatalf("after the candidate turned Ready: weight %d, readiness from %q, told %+v", st.Weight, st.ReadinessFrom, st.Told)
	}
	// The same state again is not told twice.
	if code, msg := replay(t, url, "resource/04-revision-update-ready-true.json", "ready-again"); code != http.StatusOK || !strings.Contains(msg, "already acted on default/hello-00002 being ready") {
		t.Fatalf("ready again: %d %s", code, msg)
	}

	// Commands as events: refused by the validator with its reason, then accepted.
	code, msg = postCommand(t, url, events.TypeResume, `{"target":"hello","namespace":"default"}`, commandToken)
	if code != http.StatusConflict || !strings.Contains(msg, "resume rejected: the rollout is not paused") {
		t.Fatalf("resume event: %d %s", code, msg)
	}
	code, msg = postCommand(t, url, events.TypePromote, `{"target":"hello","namespace":"default","requester":"release-bot","reason":"canary healthy"}`, commandToken)
	if code != http.StatusOK || !strings.Contains(msg, "promoted") {
		t.Fatalf("promote event: %d %s", code, msg)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v, %v", res, err)
	}
	var promote *api.CommandRecord
	st := s.status()
	for i := range st.Commands {
		if st.Commands[i].Name == api.CommandPromote {
			promote = &st.Commands[i]
		}
	}
	if promote == nil || promote.By != "release-bot (via token:pipeline)" || promote.Reason != "canary healthy" {
		t.Fatalf("promote record: %+v", st.Commands)
	}

	// After the rollout, the Revision's events start nothing new.
	if code, msg := replay(t, url, "resource/04-revision-update-ready-true.json", "after-end"); code != http.StatusOK || !strings.Contains(msg, "ignored") {
		t.Fatalf("event after the end: %d %s", code, msg)
	}
	eventually(t, 10*time.Second, "progress events at the sink", func() bool {
		return snk.Has(events.ProgressStarted) && snk.Has(events.ProgressStep) && snk.Has(events.ProgressPromoted) && snk.Has(events.ProgressSucceeded)
	})
	recordHistory(t, s.temporal, "rollout-events.json")
}

// With Temporal unreachable — its address takes connections and never
// answers, as a hung server or a dropped link does (a refused connection
// fails fast either way) — the receiver answers an event that needs it 503
// at once, from its gate's probe, where a call through the Temporal client
// waits out its deadline. Both times are logged.
func TestReceiverAnswersAtOnceWhenTemporalIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // never answered, never closed until the end
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	addr := ln.Addr().String()
	tc, err := client.NewLazyClient(client.Options{HostPort: addr, Logger: quietLog{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	k := knativefake.New(helloService(nil)...)
	serve := func(gate *receiver.Gate) string {
		rcv := &receiver.Receiver{
			Control: &control.Client{Temporal: tc, TaskQueue: "q", Identity: "sluice-receiver"}, Knative: knative.Client{Serving: k},
			AllowUnauthenticatedSource: true, MaxBody: receiver.DefaultMaxBody, Log: slog.New(slog.DiscardHandler),
			Metrics: receiver.NewMetrics(prometheus.NewRegistry()), Seen: receiver.NewSeen(100, time.Minute), Gate: gate,
		}
		srv := httptest.NewServer(rcv)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate := &receiver.Gate{Check: func(ctx context.Context) error {
		_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}, Every: 200 * time.Millisecond}
	go gate.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for gate.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the gate's probe did not find Temporal unreachable in 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	gated := serve(gate)
	var took []time.Duration
	for i := range 5 {
		began := time.Now()
		code, msg := replay(t, gated, "resource/02-revision-add.json", fmt.Sprint("gated-", i))
		took = append(took, time.Since(began))
		if code != http.StatusServiceUnavailable || !strings.Contains(msg, "Temporal unavailable") {
			t.Fatalf("with the gate: %d %s", code, msg)
		}
	}
	slices.Sort(took)
	if took[2] > 100*time.Millisecond {
		t.Errorf("answered in %v (median %v), want under 100ms", took, took[2])
	}
	began := time.Now()
	code, msg := replay(t, serve(nil), "resource/02-revision-add.json", "ungated")
	t.Logf("Temporal unreachable: answered %d in %v (median of 5) with the gate, in %v through the client alone (%d %s)",
		http.StatusServiceUnavailable, took[2], time.Since(began).Round(time.Millisecond), code, msg)
}

type quietLog struct{}

func (quietLog) Debug(string, ...any) {}
func (quietLog) Info(string, ...any)  {}
func (quietLog) Warn(string, ...any)  {}
func (quietLog) Error(string, ...any) {}
