package mirror

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// TestQueueWritesATargetsWaitingEventsOnce: events that wait their turn
// together are one Rollout write, a retried or late one among them takes
// nothing back, and of the steps taken meanwhile only the last shows as a
// Kubernetes event; the outcome's event always does.
func TestQueueWritesATargetsWaitingEventsOnce(t *testing.T) {
	w, kube := newWriter(t, service("hello"))
	writes := 0
	w.Dynamic.(interface {
		PrependReactor(verb, resource string, reaction k8stesting.ReactionFunc)
	}).PrependReactor("*", "rollouts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			writes++
		}
		return false, nil, nil
	})
	for _, p := range []events.Progress{
		progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""),
		progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""),
		progress(3, "step", api.PhaseHolding, 50, 2, "sluice", ""),
		progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""), // a retried activity, late
		progress(4, "step", api.PhaseHolding, 100, 3, "sluice", ""),
		progress(5, "succeeded", api.PhaseSucceeded, 100, 3, "sluice", ""),
	} {
		w.Enqueue(p)
	}
	// Stopped before it starts: what is queued is flushed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.drain(ctx)

	r := readRollout(t, w, "hello")
	if r.Status.Outcome != "Succeeded" || r.Status.Sequence != 5 || r.Status.Weight != 100 {
		t.Errorf("status %+v", r.Status)
	}
	// The create of the Rollout, then one write of its status.
	if writes != 2 {
		t.Errorf("%d writes of Rollouts, want the create and one status write", writes)
	}
	evs, err := kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs.Items {
		got = append(got, e.Reason+" "+e.Message)
	}
	slices.Sort(got)
	want := []string{"RolloutStarted rolling out hello-00002, stable hello-00001", "RolloutStep hello-00002 at 100% (step 3/3)", "RolloutSucceeded hello-00002 at 100% (step 3/3)"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestQueueTakesTargetsInTurn: a target whose events keep coming does not
// hold up the others, and a paused rollout's event is kept between steps.
func TestQueueTakesTargetsInTurn(t *testing.T) {
	w, _ := newWriter(t, service("hello"), service("other"))
	other := progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", "")
	other.Data.Name, other.ID = "other", "run-2-01"
	w.Enqueue(progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	w.Enqueue(other)
	w.Enqueue(progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""))
	if got := w.q.first(); got != "default/Service/hello" {
		t.Fatalf("first turn %q", got)
	}
	if batch := w.q.take("default/Service/hello"); len(batch) != 2 {
		t.Fatalf("hello's batch %+v", batch)
	}
	if got := w.q.first(); got != "default/Service/other" {
		t.Fatalf("second turn %q", got)
	}

	batch := []events.Progress{
		progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""),
		progress(3, "paused", api.PhaseHolding, 10, 1, "jane", "look first"),
		progress(4, "resumed", api.PhaseHolding, 10, 1, "jane", ""),
		progress(5, "step", api.PhaseHolding, 50, 2, "sluice", ""),
		progress(6, "analysis", api.PhaseHolding, 50, 2, "sluice", ""),
		progress(7, "step", api.PhaseHolding, 100, 3, "sluice", ""),
	}
	var reasons []string
	for _, p := range recorded(batch) {
		_, r := eventKind(p)
		reasons = append(reasons, r+"@"+itoa(p.Data.Sequence))
	}
	if want := []string{"RolloutStep@02", "Paused@03", "Resumed@04", "RolloutStep@07"}; !slices.Equal(reasons, want) {
		t.Errorf("recorded %v, want %v", reasons, want)
	}
}

// TestQueueWritesWhatComesWhileItRuns: the drain loop writes what is
// queued after it started waiting.
func TestQueueWritesWhatComesWhileItRuns(t *testing.T) {
	w, _ := newWriter(t, service("hello"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.drain(ctx)
	}()
	w.Enqueue(progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	w.Enqueue(progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if u, err := w.Dynamic.Resource(GVR).Namespace("default").Get(ctx, "hello", metav1.GetOptions{}); err == nil {
			var r Rollout
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r) == nil && r.Status.Sequence == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the queued events were not written within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

// statuses answers rollouts' status from a map, counting the reads.
type statuses struct {
	by    map[string]api.Status
	reads []string
}

func (s *statuses) RolloutStatus(_ context.Context, t knative.TargetRef) (api.Status, bool, error) {
	s.reads = append(s.reads, t.Name)
	v, ok := s.by[t.Name]
	return v, ok, nil
}

// TestResyncRewritesRolloutsNotEnded: a starting worker brings every
// Rollout not ended up to its workflow (progress a killed worker had queued
// but not written), and leaves the ended ones unread.
func TestResyncRewritesRolloutsNotEnded(t *testing.T) {
	ctx := context.Background()
	w, _ := newWriter(t, service("hello"), service("done"))
	w.Progress(ctx, progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	ended := progress(3, "succeeded", api.PhaseSucceeded, 100, 3, "sluice", "")
	ended.Data.Name, ended.ID = "done", "run-2-03"
	w.Progress(ctx, ended)

	src := &statuses{by: map[string]api.Status{"hello": {
		Target:    knative.TargetRef{Namespace: "default", Kind: "Service", Name: "hello"},
		Candidate: "hello-00002", Stable: "hello-00001", Phase: api.PhaseHolding, Shown: api.PhaseHolding,
		StepNumber: 2, StepCount: 3, Weight: 50, AsOf: t0.Add(time.Hour), StartedAt: t0,
	}}}
	r := &Refresher{Writer: w, Source: src, Log: slog.New(slog.DiscardHandler)}
	var objs []any
	for _, name := range []string{"hello", "done"} {
		objs = append(objs, toUnstructured(t, readRollout(t, w, name)))
	}
	r.resync(ctx, objs)
	if !slices.Equal(src.reads, []string{"hello"}) {
		t.Errorf("read the workflows of %q, want only hello's", src.reads)
	}
	if got := readRollout(t, w, "hello").Status; got.Weight != 50 || got.Step != 2 || got.Phase != string(api.PhaseHolding) {
		t.Errorf("hello after the resync: %+v", got)
	}
}

// TestQueueFinishesTheBatchItIsWritingAsTheWorkerStops: a stop that comes
// while a target's batch is being written ends its pacing, not its writes:
// the batch's Kubernetes events are recorded too.
func TestQueueFinishesTheBatchItIsWritingAsTheWorkerStops(t *testing.T) {
	w, kube := newWriter(t, service("hello"))
	w.Rate = 1 // a second per event after the status write: the stop comes first
	ctx, cancel := context.WithCancel(context.Background())
	w.Dynamic.(interface {
		PrependReactor(verb, resource string, reaction k8stesting.ReactionFunc)
	}).PrependReactor("update", "rollouts", func(k8stesting.Action) (bool, runtime.Object, error) {
		cancel() // the worker stops as the status is written
		return false, nil, nil
	})
	w.Enqueue(progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	w.Enqueue(progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""))
	w.Enqueue(progress(3, "paused", api.PhaseHolding, 10, 1, "jane", "look first"))
	w.drain(ctx)
	evs, err := kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs.Items {
		got = append(got, e.Reason)
	}
	slices.Sort(got)
	if want := []string{"Paused", "RolloutStarted", "RolloutStep"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
