package activities

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/knative"
)

// A retry of a stage's wait after a lost worker waits only what is left of
// the stage: past its end, it reads the Revision once and answers.
func TestAwaitPodsStopsAtTheStagesEnd(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	ref := knative.RevisionRef{Namespace: ns, Name: "hello-00002"}
	start := time.Now()
	v, err := f.env.ExecuteActivity(f.a.AwaitPods, AwaitPodsInput{RevisionRef: ref, Want: 3, For: time.Minute, Until: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var st knative.RevisionState
	if err := v.Get(&st); err != nil || !st.Found || st.Pods != 0 {
		t.Fatalf("state %+v, %v", st, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %s past the stage's end", took)
	}
}

// Someone else's bounds are not overwritten, and retrying cannot help.
func TestSetScaleRefusesDrift(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	ref := knative.RevisionRef{Namespace: ns, Name: "hello-00002"}
	last := knative.Pods(2)
	_, err := f.env.ExecuteActivity(f.a.SetScale, ScaleInput{RevisionRef: ref, Bounds: knative.Pods(3), Last: &last})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrScaleDrift || !appErr.NonRetryable() {
		t.Fatalf("SetScale over bounds sluice did not write: %v", err)
	}
	if _, err := f.env.ExecuteActivity(f.a.SetScale, ScaleInput{RevisionRef: ref, Bounds: knative.Pods(3)}); err != nil {
		t.Fatalf("SetScale without a check: %v", err)
	}
}

// A worker told to stop (a rolling update) gives up a stage's wait at once,
// with a retryable error, so Temporal hands it to a worker that stays; it
// neither holds it until its stop timeout nor answers with the pods it last
// saw, which the workflow would take for the stage's end.
func TestAwaitPodsGivesWayToAStoppingWorker(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	stop := make(chan struct{})
	f.env.SetWorkerStopChannel(stop)
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	ref := knative.RevisionRef{Namespace: ns, Name: "hello-00002"}
	start := time.Now()
	_, err := f.env.ExecuteActivity(f.a.AwaitPods, AwaitPodsInput{RevisionRef: ref, Want: 3, For: time.Minute, Until: time.Now().Add(time.Minute)})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrWorkerStopping || appErr.NonRetryable() {
		t.Fatalf("AwaitPods on a stopping worker: %v; want a retryable %s", err, ErrWorkerStopping)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("AwaitPods took %s to give way", took)
	}
}
