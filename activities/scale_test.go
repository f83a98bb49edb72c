package activities

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

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

// An API server that has just started refuses every request until it has
// read its RBAC objects: the worker's own permission, refused then, is
// retried for a while rather than stopping the rollout. An admission
// webhook's 403 says the same thing again, and is not.
func TestSetScaleRetriesAnAuthorizerThatIsStarting(t *testing.T) {
	gr := schema.GroupResource{Group: "serving.knative.dev", Resource: "revisions"}
	rbac := apierrors.NewForbidden(gr, "hello-00002", errors.New(`User "system:serviceaccount:sluice-system:sluice-worker" cannot patch resource "revisions" in API group "serving.knative.dev" in the namespace "default"`))
	admission := apierrors.NewForbidden(gr, "hello-00002", errors.New(`admission webhook "policy.example.com" denied the request: revisions are frozen`))
	for _, tt := range []struct {
		name      string
		err       error
		retryable bool
	}{{"the authorizer", rbac, true}, {"an admission webhook", admission, false}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, helloObjects()...)
			f.k.PrependReactor("patch", "revisions", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			_, err := f.env.ExecuteActivity(f.a.SetScale, ScaleInput{RevisionRef: knative.RevisionRef{Namespace: ns, Name: "hello-00002"}, Bounds: knative.Pods(3)})
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.NonRetryable() == tt.retryable {
				t.Fatalf("SetScale refused by %s: %v; want retryable %v", tt.name, err, tt.retryable)
			}
			if tt.retryable && !strings.Contains(err.Error(), "has just started") {
				t.Fatalf("a retried refusal must say why: %v", err)
			}
		})
	}
	// Once the grace has passed, the same refusal is the permission missing.
	if !authzDenial(rbac) || authzDenial(admission) || authzDenial(errors.New("cannot")) {
		t.Fatal("authzDenial sorts the authorizer's 403 from others wrongly")
	}
}
