package mirror

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// commander records the commands it is given.
type commander struct {
	verified error
	mu       sync.Mutex
	sent     []string
}

func (c *commander) Verified(context.Context) error { return c.verified }

func (c *commander) Command(_ context.Context, t knative.TargetRef, name, by, reason, id string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, t.Name+" "+name+" "+by+" "+reason+" "+id)
	if name == api.CommandResume {
		return "", errors.New("the rollout is not paused")
	}
	return "promoted", nil
}

func (c *commander) commands() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sent...)
}

// asked is the Rollout of hello after the first progress, with a command.
func asked(t *testing.T, w *Writer, cmd CommandRequest) Rollout {
	t.Helper()
	w.Progress(context.Background(), progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	u, err := w.Dynamic.Resource(GVR).Namespace("default").Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(u.Object, map[string]any{"id": cmd.ID, "name": cmd.Name, "by": cmd.By, "reason": cmd.Reason}, "spec", "command")
	if _, err := w.Dynamic.Resource(GVR).Namespace("default").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var r Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func answered(t *testing.T, w *Writer, id string) *CommandResult {
	t.Helper()
	var res *CommandResult
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if res = readRollout(t, w, "hello").Status.Command; res != nil && res.ID == id {
			return res
		}
	}
	t.Fatalf("no answer to command %s; status.command %+v", id, res)
	return nil
}

// TestCommandAskedOnTheResource: a command asked in spec.command is sent
// once, as its asker, and answered in status.command, which later progress
// keeps; an answered command is not sent again.
func TestCommandAskedOnTheResource(t *testing.T) {
	ctx := context.Background()
	w, _ := newWriter(t, service("hello"))
	c := &commander{}
	r := &Refresher{Writer: w, Commander: c, Log: slog.New(slog.DiscardHandler)}
	ro := asked(t, w, CommandRequest{ID: "c1", Name: api.CommandPromote, By: "alice", Reason: "looks good"})
	r.observe(ctx, toUnstructured(t, ro))
	r.observe(ctx, toUnstructured(t, ro)) // the informer again, before the answer
	res := answered(t, w, "c1")
	if !res.Accepted || res.By != "alice" || res.Message != "promoted" {
		t.Errorf("answer %+v", res)
	}
	r.observe(ctx, toUnstructured(t, ro)) // a copy from before the answer, handed over late
	time.Sleep(50 * time.Millisecond)
	if got := c.commands(); len(got) != 1 || got[0] != "hello promote alice looks good c1" {
		t.Errorf("sent %q, want one promote by alice", got)
	}
	w.Progress(ctx, progress(2, "step", api.PhaseHolding, 50, 1, "sluice", ""))
	after := readRollout(t, w, "hello")
	if after.Status.Command == nil || after.Status.Command.ID != "c1" {
		t.Errorf("a later progress write lost the answer: %+v", after.Status.Command)
	}
	r.observe(ctx, toUnstructured(t, after))
	time.Sleep(50 * time.Millisecond)
	if got := c.commands(); len(got) != 1 {
		t.Errorf("an answered command was sent again: %q", got)
	}
}

// TestCommandRefusals: a rollout's refusal, an unknown command and a
// cluster that does not check who asked all end in an answer that says so,
// and only the first reaches the rollout.
func TestCommandRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, want string
		verified        error
		sent            int
	}{
		{"the rollout refuses", api.CommandResume, "the rollout is not paused", nil, 1},
		{"not a command", "restart", `"restart" is not a command; ask one of [promote promote-full pause resume abort reload-analysis]`, nil, 0},
		{"no policy", api.CommandAbort, "not carried out: the requester's name cannot be trusted: policy missing", errors.New("policy missing"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := newWriter(t, service("hello"))
			c := &commander{verified: tc.verified}
			r := &Refresher{Writer: w, Commander: c, Log: slog.New(slog.DiscardHandler)}
			ro := asked(t, w, CommandRequest{ID: "c2", Name: tc.cmd, By: "alice"})
			r.observe(context.Background(), toUnstructured(t, ro))
			res := answered(t, w, "c2")
			if res.Accepted || res.Message != tc.want {
				t.Errorf("answer %+v, want refused with %q", res, tc.want)
			}
			if got := c.commands(); len(got) != tc.sent {
				t.Errorf("sent %q", got)
			}
		})
	}
}

func toUnstructured(t *testing.T, ro Rollout) *unstructured.Unstructured {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ro)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// TestRefresherReadsOnlyAtGates: a hold that ends in a step, a pause or
// the end brings a progress event of its own; only one that ends at a gate
// has the worker read the workflow when it ends.
func TestRefresherReadsOnlyAtGates(t *testing.T) {
	w, _ := newWriter(t)
	r := &Refresher{Writer: w, Log: slog.New(slog.DiscardHandler)}
	until := metav1.NewTime(time.Now().Add(time.Hour))
	for _, gate := range []bool{false, true} {
		ro := Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
			Spec:   Spec{Target: Target{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "hello"}},
			Status: Status{Phase: "Holding", HoldUntil: &until, GateAfterHold: gate}}
		r.observe(context.Background(), toUnstructured(t, ro))
		r.mu.Lock()
		_, scheduled := r.timers["default/hello"]
		r.mu.Unlock()
		if scheduled != gate {
			t.Errorf("gate after the hold %v: a read scheduled %v", gate, scheduled)
		}
	}
	r.schedule("default/hello", nil)
}
