package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/workflows"
	"github.com/sluicehq/sluice/workflows/control"
)

// exampleChange is how the next change to the workflow is versioned
// (docs/operations.md): a GetVersion at the changed line, with an ID named
// after the change. Here the change is a timer before everything else.
func exampleChange(ctx workflow.Context, in workflows.RunInput) (api.Result, error) {
	if workflow.GetVersion(ctx, "example-settle", workflow.DefaultVersion, 1) == 1 {
		if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
			return api.Result{}, err
		}
	}
	return workflows.Rollout(ctx, in)
}

// ungatedChange is the same change without the gate.
func ungatedChange(ctx workflow.Context, in workflows.RunInput) (api.Result, error) {
	if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
		return api.Result{}, err
	}
	return workflows.Rollout(ctx, in)
}

// runWorker polls queue with fn as the rollout workflow until the returned
// stop is called.
func runWorker(t *testing.T, s *stack, queue string, fn func(workflow.Context, workflows.RunInput) (api.Result, error)) (stop func()) {
	t.Helper()
	settings, err := settings.LoadSettings(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	w := sdkworker.New(s.temporal, queue, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: api.RolloutWorkflow})
	w.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: s.k}, Defaults: settings.Defaults})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w.Stop
}

func history(t *testing.T, c client.Client, runID string) *historypb.History {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), api.RolloutID(hello), runID, false, 0)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// TestVersionedChangeOnDevServer: a rollout started by the baseline worker
// is finished by a worker whose workflow carries a gated change (it takes
// the old path: its history has no marker), and a rollout started by the
// new worker takes the new one. The same change ungated breaks the first
// rollout's history. The stack's cleanup checks that no workflow task
// failed on the server.
func TestVersionedChangeOnDevServer(t *testing.T) {
	objs := append(helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "10m"}),
		knativefake.Revision(ns, "hello", 3, true))
	s := startStack(t, objs...)
	ctx := waitCtx(t)
	queue := "sluice-it-versioning"
	ctl := &control.Client{Temporal: s.temporal, TaskQueue: queue, Identity: "it@test"}
	holding := func() bool {
		st, err := ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseHolding
	}

	stopBaseline := runWorker(t, s, queue, workflows.Rollout)
	first, err := ctl.Start(ctx, hello, "hello-00002", "started by the baseline")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the baseline's rollout to hold", holding)
	stopBaseline()

	stopNew := runWorker(t, s, queue, exampleChange)
	defer stopNew()
	if _, err := ctl.Send(ctx, hello, api.CommandPromoteFull, "finished by the new worker"); err != nil {
		t.Fatalf("promote-full on the new worker: %v", err)
	}
	if res, err := ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("the baseline's rollout on the new worker: %+v, %v", res, err)
	}
	old := history(t, s.temporal, first)

	second, err := ctl.Start(ctx, hello, "hello-00003", "started by the new worker")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new worker's rollout to hold", holding)
	if _, err := ctl.Send(ctx, hello, api.CommandAbort, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Wait(ctx, hello); err != nil {
		t.Fatal(err)
	}
	markers := func(h *historypb.History) (n int) {
		for _, ev := range h.Events {
			if a := ev.GetMarkerRecordedEventAttributes(); a != nil && a.GetMarkerName() == "Version" &&
				strings.Contains(string(a.GetDetails()["change-id"].GetPayloads()[0].GetData()), "example-settle") {
				n++
			}
		}
		return n
	}
	if n := markers(old); n != 0 {
		t.Fatalf("the rollout the baseline started has %d version markers; it must keep the old path", n)
	}
	if n := markers(history(t, s.temporal, second)); n != 1 {
		t.Fatalf("the rollout the new worker started has %d version markers, want 1", n)
	}

	replay := func(fn func(workflow.Context, workflows.RunInput) (api.Result, error)) error {
		r := sdkworker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: api.RolloutWorkflow})
		return r.ReplayWorkflowHistory(nil, old)
	}
	// TMPRL1100 is the SDK's code for a history the code does not match.
	if err := replay(exampleChange); err != nil {
		t.Fatalf("the gated change does not replay the baseline's rollout: %v", err)
	}
	if err := replay(ungatedChange); err == nil || !strings.Contains(err.Error(), "TMPRL1100") {
		t.Fatalf("the ungated change replays the baseline's rollout (%v); it must fail as nondeterministic", err)
	}
}
