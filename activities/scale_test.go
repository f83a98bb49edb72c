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
