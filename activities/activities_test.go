package activities

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
	"k8s.io/utils/ptr"
)

// These tests run the activities over knativefake, the generated fake
// clientset. The fake accepts strategic-merge patches, runs no validation and
// ignores stale resourceVersions: the tests below assert the patch type and
// body sluice sends, and the integration tests repeat the writes against a
// real API server.

const ns = "default"

var tgt = knativefake.Target

type fixture struct {
	t   *testing.T
	k   *knativefake.Cluster
	a   *Activities
	env *testsuite.TestActivityEnvironment
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	var s testsuite.WorkflowTestSuite
	k := knativefake.New(objs...)
	a := &Activities{Knative: knative.Client{Serving: k}, Defaults: config.BuiltinDefaults()}
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	return &fixture{t: t, k: k, a: a, env: env}
}

func helloObjects() []runtime.Object {
	return []runtime.Object{
		knativefake.Service(ns, "hello", nil, tgt("hello-00001", 100, ""), tgt("hello-00001", 0, "current")),
		knativefake.Revision(ns, "hello", 1, true),
		knativefake.Revision(ns, "hello", 2, true),
		knativefake.Revision(ns, "hello", 3, false),
	}
}

func (f *fixture) setTraffic(in SetTrafficInput) (SetTrafficResult, error) {
	// The write alone: a millisecond of verifying is none.
	v, err := f.env.ExecuteActivity(f.a.ApplyTraffic, ApplyTrafficInput{SetTrafficInput: in, VerifyFor: time.Millisecond})
	if err != nil {
		return SetTrafficResult{}, err
	}
	var res ApplyTrafficResult
	return res.SetTrafficResult, v.Get(&res)
}

func (f *fixture) liveTraffic() []servingv1.TrafficTarget {
	svc, err := f.k.ServingV1().Services(ns).Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return svc.Spec.Traffic
}

func errType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

var helloRef = knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}

func TestSetTrafficTestsTheGenerationItRead(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 80, ""), tgt("hello-00001", 0, "current"), tgt("hello-00002", 20, "")}
	res, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: f.liveTraffic(), Desired: desired})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !knative.SameTraffic(f.liveTraffic(), desired) {
		t.Fatalf("result %+v, live %s", res, knative.FormatTraffic(f.liveTraffic()))
	}
	var patches []k8stesting.PatchAction
	for _, act := range f.k.Actions() {
		if p, ok := act.(k8stesting.PatchAction); ok {
			patches = append(patches, p)
		}
	}
	if len(patches) != 1 || patches[0].GetPatchType() != types.JSONPatchType {
		t.Fatalf("patches = %v, want one JSON patch", patches)
	}
	if body := string(patches[0].GetPatch()); !strings.Contains(body, `{"op":"test","path":"/metadata/generation","value":1}`) || !strings.Contains(body, `"path":"/spec/traffic"`) {
		t.Fatalf("patch body %s does not test the generation read, or lacks traffic", body)
	}

	// Idempotent: the same write again changes nothing and sends nothing.
	res, err = f.setTraffic(SetTrafficInput{Object: helloRef, Expected: desired, Desired: desired})
	if err != nil || res.Changed || f.k.WriteCount("hello") != 1 {
		t.Fatalf("repeat write: %+v, %v, writes %d", res, err, f.k.WriteCount("hello"))
	}
}

func TestSetTrafficStopsOnDrift(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	stale := []servingv1.TrafficTarget{tgt("hello-00001", 100, "")}
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 50, ""), tgt("hello-00002", 50, "")}
	_, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: stale, Desired: desired})
	if errType(err) != ErrDrift || !strings.Contains(err.Error(), "changed outside sluice") || !strings.Contains(err.Error(), "tag current") {
		t.Fatalf("error = %v, want drift naming what changed", err)
	}
	if f.k.WriteCount("hello") != 0 {
		t.Fatal("drift must not write")
	}
	if _, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: stale, Desired: desired, Force: true}); err != nil {
		t.Fatalf("forced write: %v", err)
	}
}

func TestSetTrafficRefusesBadLists(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	live := f.liveTraffic()
	for name, tc := range map[string]struct {
		desired  []servingv1.TrafficTarget
		wantType string
		want     string
	}{
		"not ready revision": {[]servingv1.TrafficTarget{tgt("hello-00001", 50, ""), tgt("hello-00003", 50, "")}, ErrRevisionNotReady, "hello-00003, which is not Ready"},
		"zero-percent not ready tag freezes the route too": {[]servingv1.TrafficTarget{tgt("hello-00001", 100, ""), tgt("hello-00003", 0, "next")}, ErrRevisionNotReady, "not Ready"},
		"missing revision": {[]servingv1.TrafficTarget{tgt("hello-00009", 100, "")}, ErrRevisionNotReady, "which is not found"},
		"bad sum":          {[]servingv1.TrafficTarget{tgt("hello-00001", 50, "")}, ErrInvalidTraffic, "Traffic targets sum to 50, want 100"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: live, Desired: tc.desired})
			if errType(err) != tc.wantType || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want %s containing %q", err, tc.wantType, tc.want)
			}
		})
	}
	if f.k.WriteCount("hello") != 0 {
		t.Fatal("a refused list must not be written")
	}
}

func TestSetTrafficRereadsOnConflict(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	conflicts := 1
	f.k.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "serving.knative.dev", Resource: "services"}, "hello", errors.New("stale resourceVersion"))
		}
		return false, nil, nil
	})
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 90, ""), tgt("hello-00002", 10, "")}
	if _, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: f.liveTraffic(), Desired: desired}); err != nil {
		t.Fatalf("write after a conflict: %v", err)
	}
	if !knative.SameTraffic(f.liveTraffic(), desired) {
		t.Fatalf("live = %s", knative.FormatTraffic(f.liveTraffic()))
	}
}

// The Service's template changes between the write's read and its patch:
// the patch's test of the generation fails, the write reads again and
// writes over the new generation, its traffic unchanged.
func TestSetTrafficWritesAgainOverATemplateChange(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	changed := false
	f.k.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !changed {
			changed = true
			gvr := servingv1.SchemeGroupVersion.WithResource("services")
			obj, err := f.k.Tracker().Get(gvr, ns, "hello")
			if err != nil {
				return true, nil, err
			}
			svc := obj.(*servingv1.Service).DeepCopy()
			svc.Generation++
			svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/hello:v4"}}
			if err := f.k.Tracker().Update(gvr, svc, ns); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 90, ""), tgt("hello-00002", 10, "")}
	res, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: f.liveTraffic(), Desired: desired})
	if err != nil {
		t.Fatalf("write over a template change: %v", err)
	}
	if !res.Changed || !knative.SameTraffic(f.liveTraffic(), desired) || res.Generation != 3 {
		t.Fatalf("result %+v, live %s", res, knative.FormatTraffic(f.liveTraffic()))
	}
	if n := f.k.WriteCount("hello"); n != 1 {
		t.Fatalf("%d traffic writes took, want the second attempt's alone", n)
	}
}

func TestSetTrafficOnDeletedTarget(t *testing.T) {
	f := newFixture(t, helloObjects()[1:]...)
	_, err := f.setTraffic(SetTrafficInput{Object: helloRef, Desired: []servingv1.TrafficTarget{tgt("hello-00001", 100, "")}})
	if errType(err) != ErrTargetNotFound {
		t.Fatalf("error = %v, want TargetNotFound", err)
	}
}

func TestVerifyTraffic(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 90, ""), tgt("hello-00002", 10, "")}
	f.k.SetFrozen(true)
	res, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: f.liveTraffic(), Desired: desired})
	if err != nil {
		t.Fatal(err)
	}
	in := VerifyInput{Object: helloRef, Desired: desired, Generation: res.Generation}
	// The status never catches up: it watches until its time is nearly up,
	// then says what is missing.
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	err = f.a.VerifyTraffic(ctx, in)
	if errType(err) != ErrNotVisible || !strings.Contains(err.Error(), "waiting for") {
		t.Fatalf("verify before status caught up: %v", err)
	}
	// The status catches up while it watches: it answers then, not at its
	// deadline (where it would fail as above).
	go func() {
		time.Sleep(200 * time.Millisecond)
		f.k.SetFrozen(false)
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.a.VerifyTraffic(ctx, in); err != nil {
		t.Fatalf("verify as the status caught up: %v", err)
	}
	if _, err := f.env.ExecuteActivity(f.a.VerifyTraffic, in); err != nil {
		t.Fatalf("verify after status caught up: %v", err)
	}
}

func TestApplyTrafficWritesAndVerifies(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 90, ""), tgt("hello-00002", 10, "")}
	apply := func(d []servingv1.TrafficTarget, verifyFor time.Duration) ApplyTrafficResult {
		t.Helper()
		expected := f.liveTraffic()
		f.k.ClearActions()
		v, err := f.env.ExecuteActivity(f.a.ApplyTraffic, ApplyTrafficInput{
			SetTrafficInput: SetTrafficInput{Object: helloRef, Expected: expected, Desired: d}, VerifyFor: verifyFor})
		if err != nil {
			t.Fatal(err)
		}
		var res ApplyTrafficResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := apply(desired, 5*time.Second); !res.Changed || !res.Visible {
		t.Errorf("status reconciles at once: %+v", res)
	}
	// One read of the Service, before the write: verification starts from
	// the patch's answer.
	gets := 0
	for _, act := range f.k.Actions() {
		if act.GetVerb() == "get" && act.GetResource().Resource == "services" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("ApplyTraffic read the Service %d times, want 1", gets)
	}
	// Knative is slow: written, not yet visible; the workflow verifies on.
	f.k.SetFrozen(true)
	next := []servingv1.TrafficTarget{tgt("hello-00001", 50, ""), tgt("hello-00002", 50, "")}
	if res := apply(next, 300*time.Millisecond); !res.Changed || res.Visible {
		t.Errorf("frozen status: %+v", res)
	}
	if got := knative.FormatTraffic(f.liveTraffic()); got != knative.FormatTraffic(next) {
		t.Errorf("live traffic %s, want %s", got, knative.FormatTraffic(next))
	}
	// A drift is reported as a plain write reports it.
	_, err := f.env.ExecuteActivity(f.a.ApplyTraffic, ApplyTrafficInput{SetTrafficInput: SetTrafficInput{
		Object: helloRef, Expected: desired, Desired: []servingv1.TrafficTarget{tgt("hello-00001", 100, "")}}})
	if errType(err) != ErrDrift {
		t.Errorf("apply from a stale starting point: %v", err)
	}
}

func (f *fixture) resolve(target knative.TargetRef, candidate string) (Resolved, error) {
	v, err := f.env.ExecuteActivity(f.a.ResolveTarget, ResolveInput{Target: target, Candidate: candidate})
	if err != nil {
		return Resolved{}, err
	}
	var res Resolved
	return res, v.Get(&res)
}

func TestResolveServiceTarget(t *testing.T) {
	objs := []runtime.Object{
		knativefake.Service(ns, "hello", map[string]string{config.AnnotationSteps: "50,100"}, tgt("@latest", 100, "")),
		knativefake.Revision(ns, "hello", 1, true),
		knativefake.Revision(ns, "hello", 2, true),
	}
	f := newFixture(t, objs...)
	res, err := f.resolve(knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}, "hello-00002")
	if err != nil {
		t.Fatal(err)
	}
	// latestRevision already resolves to the Ready candidate; the stable one
	// is the newest Ready Revision before it.
	if res.Stable != "hello-00001" || res.CandidateGeneration != 2 || res.Object != helloRef || len(res.Policy.Steps) != 2 {
		t.Fatalf("resolved %+v", res)
	}
}

// A capacity plan stages from the stable's Ready pods, but never from fewer
// than its template's min-scale: a stable a pod short of it — one being
// replaced, or bounds a rollout has just given back — runs that pod again
// during the rollout, beside the candidate's.
func TestResolveStablePodsAtLeastItsMinScale(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready *int32
		min   string
		want  int32
	}{
		{name: "short of its min-scale", ready: ptr.To[int32](1), min: "2", want: 2},
		{name: "no count reported yet", min: "2", want: 2},
		{name: "scaled above it", ready: ptr.To[int32](3), min: "2", want: 3},
		{name: "no min-scale", ready: ptr.To[int32](1), want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stable := knativefake.Revision(ns, "hello", 1, true)
			stable.Status.ActualReplicas = tc.ready
			if tc.min != "" {
				stable.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": tc.min}
			}
			f := newFixture(t, knativefake.Service(ns, "hello", map[string]string{config.AnnotationSteps: "50,100"}, tgt("hello-00001", 100, "")),
				stable, knativefake.Revision(ns, "hello", 2, true))
			res, err := f.resolve(knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}, "hello-00002")
			if err != nil {
				t.Fatal(err)
			}
			if res.Stable != "hello-00001" || res.StablePods != tc.want {
				t.Fatalf("stable %s with %d pods, want hello-00001 with %d", res.Stable, res.StablePods, tc.want)
			}
		})
	}
}

// A Service created where Knative's defaulting webhook did not run has no
// spec.traffic: Knative reads that as all traffic to the latest Ready
// Revision, and so must sluice, or its first step would write a list
// without the stable Revision.
func TestResolveServiceWithoutTraffic(t *testing.T) {
	f := newFixture(t, knativefake.Service(ns, "hello", nil), knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, true))
	res, err := f.resolve(knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}, "hello-00002")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stable != "hello-00001" || knative.FormatTraffic(res.Traffic) != knative.FormatTraffic([]servingv1.TrafficTarget{tgt("@latest", 100, "")}) {
		t.Fatalf("resolved stable %q, traffic %s", res.Stable, knative.FormatTraffic(res.Traffic))
	}
	// The write from that starting point is not mistaken for drift.
	pinned := []servingv1.TrafficTarget{tgt("hello-00001", 100, "")}
	if _, err := f.setTraffic(SetTrafficInput{Object: helloRef, Expected: res.Traffic, Desired: pinned}); err != nil {
		t.Fatal(err)
	}
	if got := knative.FormatTraffic(f.liveTraffic()); got != knative.FormatTraffic(pinned) {
		t.Errorf("live traffic %s, want %s", got, knative.FormatTraffic(pinned))
	}
}

func TestResolveRouteTarget(t *testing.T) {
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api",
		Annotations: map[string]string{config.AnnotationRollout: "enabled", config.AnnotationRoute: "api-route"}}}
	route := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-route"},
		Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{tgt("api-00001", 100, "")}}}
	f := newFixture(t, cfg, route, knativefake.Revision(ns, "api", 1, true), knativefake.Revision(ns, "api", 2, false))
	res, err := f.resolve(knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}, "api-00002")
	if err != nil {
		t.Fatal(err)
	}
	if res.Object != (knative.ObjectRef{Namespace: ns, Kind: knative.KindRoute, Name: "api-route"}) || res.Stable != "api-00001" || res.Configuration != "api" {
		t.Fatalf("resolved %+v", res)
	}
}

func TestResolveErrors(t *testing.T) {
	bad := knativefake.Service(ns, "bad", map[string]string{config.AnnotationSteps: "50,20"}, tgt("bad-00001", 100, ""))
	off := knativefake.Service(ns, "off", nil, tgt("off-00001", 100, ""))
	off.Annotations[config.AnnotationRollout] = "disabled"
	typo := knativefake.Service(ns, "typo", map[string]string{"sluice.dev/gate": "100"}, tgt("typo-00001", 100, ""))
	noRoute := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api",
		Annotations: map[string]string{config.AnnotationRollout: "enabled"}}}
	f := newFixture(t, bad, off, typo, noRoute, knativefake.Service(ns, "hello", nil, tgt("hello-00001", 100, "")), knativefake.Revision(ns, "hello", 1, true))
	for _, tc := range []struct {
		target    knative.TargetRef
		candidate string
		errType   string
		want      string
	}{
		{knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "gone"}, "gone-00002", ErrTargetNotFound, "Service default/gone not found"},
		{knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "bad"}, "bad-00002", ErrInvalidPolicy, `sluice.dev/steps: weights must increase and end at 100, got "50,20"`},
		{knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "typo"}, "typo-00002", ErrInvalidPolicy, "sluice.dev/gate: is not a sluice annotation, and sluice would ignore it; did you mean sluice.dev/gates?"},
		{knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "off"}, "off-00002", ErrNotOptedIn, "set the annotation sluice.dev/rollout: enabled"},
		{knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}, "api-00002", ErrInvalidPolicy, "sluice.dev/route must name the Route"},
		{knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}, "hello-00007", ErrTargetNotFound, "Revision default/hello-00007 not found"},
		{knative.TargetRef{Namespace: ns, Kind: "Deployment", Name: "x"}, "x", ErrInvalidPolicy, `unknown target kind "Deployment"`},
	} {
		_, err := f.resolve(tc.target, tc.candidate)
		if errType(err) != tc.errType || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want %s containing %q", tc.target, err, tc.errType, tc.want)
		}
	}
}

func TestReadRevision(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	if err := f.k.SetRevisionReady(ns, "hello-00003", "False", "ContainerMissing", "image not found"); err != nil {
		t.Fatal(err)
	}
	read := func(name string) knative.RevisionState {
		v, err := f.env.ExecuteActivity(f.a.ReadRevision, knative.RevisionRef{Namespace: ns, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		var st knative.RevisionState
		if err := v.Get(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := read("hello-00002"); !st.Found || !st.Ready || st.Generation != 2 {
		t.Errorf("ready revision: %+v", st)
	}
	if st := read("hello-00003"); !st.Failed || st.Ready || st.Message != "image not found" {
		t.Errorf("failed revision: %+v", st)
	}
	if st := read("hello-00042"); st.Found {
		t.Errorf("missing revision: %+v", st)
	}
}

func TestAwaitRevision(t *testing.T) {
	f := newFixture(t, append(helloObjects(), knativefake.Revision(ns, "hello", 4, false))...)
	await := func(name string, wait time.Duration) knative.RevisionState {
		t.Helper()
		st, err := f.a.AwaitRevision(context.Background(), AwaitRevisionInput{RevisionRef: knative.RevisionRef{Namespace: ns, Name: name}, For: wait})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Already Ready: answers at once, whatever the grace (else the test
	// would time out).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := f.a.AwaitRevision(ctx, AwaitRevisionInput{RevisionRef: knative.RevisionRef{Namespace: ns, Name: "hello-00002"}, For: time.Minute, Grace: time.Hour}); err != nil || !st.Ready {
		t.Errorf("hello-00002: %+v, %v", st, err)
	}
	// Not Ready within the wait: its state then.
	if st := await("hello-00003", 300*time.Millisecond); !st.Found || st.Ready || st.Failed {
		t.Errorf("hello-00003 before it is Ready: %+v", st)
	}
	// Turns Ready while watched: answers then (else it would wait its minute).
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = f.k.SetRevisionReady(ns, "hello-00003", "True", "", "")
	}()
	if st := await("hello-00003", time.Minute); !st.Ready {
		t.Errorf("hello-00003 after it turned Ready: %+v", st)
	}
	// Turns failed while watched, with a grace for the event: answers no
	// sooner than the grace.
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = f.k.SetRevisionReady(ns, "hello-00004", "False", "ExitCode1", "boom")
	}()
	began := time.Now()
	st, err := f.a.AwaitRevision(context.Background(), AwaitRevisionInput{RevisionRef: knative.RevisionRef{Namespace: ns, Name: "hello-00004"}, For: time.Minute, Grace: 400 * time.Millisecond})
	if err != nil || !st.Failed || st.Message != "boom" {
		t.Errorf("hello-00004 after it failed: %+v, %v", st, err)
	}
	if waited := time.Since(began); waited < 500*time.Millisecond {
		t.Errorf("answered %s after the start, want the failure (100ms) plus the grace (400ms)", waited)
	}
	// Gone.
	if st := await("hello-00009", time.Minute); st.Found {
		t.Errorf("missing Revision: %+v", st)
	}
}

// Activities that wait heartbeat while they do, so a lost worker is noticed
// in seconds: AwaitRevision on a Revision that is not Ready, and
// ApplyTraffic watching a status that does not show its write.
func TestWaitingActivitiesHeartbeat(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	var beats atomic.Int32
	f.env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats.Add(1) })
	wait := HeartbeatEvery + 500*time.Millisecond
	if _, err := f.env.ExecuteActivity(f.a.AwaitRevision, AwaitRevisionInput{RevisionRef: knative.RevisionRef{Namespace: ns, Name: "hello-00003"}, For: wait}); err != nil {
		t.Fatal(err)
	}
	if beats.Load() < 1 {
		t.Errorf("AwaitRevision waited %s with no heartbeat", wait)
	}
	beats.Store(0)
	f.k.SetFrozen(true)
	_, err := f.env.ExecuteActivity(f.a.ApplyTraffic, ApplyTrafficInput{SetTrafficInput: SetTrafficInput{
		Object:   knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "hello"},
		Expected: []servingv1.TrafficTarget{tgt("hello-00001", 100, ""), tgt("hello-00001", 0, "current")},
		Desired:  []servingv1.TrafficTarget{tgt("hello-00001", 50, ""), tgt("hello-00001", 0, "current"), tgt("hello-00002", 50, "")},
	}, VerifyFor: wait})
	if err != nil {
		t.Fatal(err)
	}
	if beats.Load() < 1 {
		t.Errorf("ApplyTraffic watched for %s with no heartbeat", wait)
	}
}

// A worker serves one cluster: a rollout naming another (started on the
// wrong task queue) must not touch this cluster's object of the same name.
func TestResolveRefusesAnotherClustersTarget(t *testing.T) {
	objs := []runtime.Object{
		knativefake.Service(ns, "hello", map[string]string{config.AnnotationSteps: "50,100"}, tgt("@latest", 100, "")),
		knativefake.Revision(ns, "hello", 1, true),
		knativefake.Revision(ns, "hello", 2, true),
	}
	f := newFixture(t, objs...)
	f.a.Cluster = "eu-west"
	hello := knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}
	_, err := f.resolve(hello.In("us-east"), "hello-00002")
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrWrongCluster || !appErr.NonRetryable() ||
		!strings.Contains(err.Error(), `names cluster "us-east", but this worker serves cluster "eu-west"; start it on that cluster's task queue (sluice-rollouts-us-east)`) {
		t.Fatalf("another cluster's target: %v", err)
	}
	if _, err := f.resolve(hello, "hello-00002"); err == nil {
		t.Fatal("a target naming no cluster was resolved by a worker of cluster eu-west")
	}
	if res, err := f.resolve(hello.In("eu-west"), "hello-00002"); err != nil || res.Stable != "hello-00001" {
		t.Fatalf("its own cluster's target: %+v, %v", res, err)
	}
}

// Someone edits the traffic while the write's own watch waits for the status
// to show it: the status can never show it, so the write ends at once as
// drift, naming both lists, and the workflow pauses as for any drift
// instead of running out the verify timeout. The later rounds of checks
// (VerifyTraffic) keep watching as before.
func TestWriteEndsOnAnEditOfIt(t *testing.T) {
	f := newFixture(t, helloObjects()...)
	desired := []servingv1.TrafficTarget{tgt("hello-00001", 90, ""), tgt("hello-00002", 10, "")}
	f.k.SetFrozen(true)
	expected := f.liveTraffic()
	go func() {
		time.Sleep(200 * time.Millisecond)
		svc, err := f.k.ServingV1().Services(ns).Get(context.Background(), "hello", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		svc.Spec.Traffic = []servingv1.TrafficTarget{tgt("hello-00001", 55, ""), tgt("hello-00002", 45, "")}
		svc.Generation++
		if _, err := f.k.ServingV1().Services(ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}()
	begin := time.Now()
	_, err := f.env.ExecuteActivity(f.a.ApplyTraffic, ApplyTrafficInput{
		SetTrafficInput: SetTrafficInput{Object: helloRef, Expected: expected, Desired: desired}, VerifyFor: 10 * time.Second})
	if errType(err) != ErrDrift || !strings.Contains(err.Error(), "hello-00001=55%") || time.Since(begin) > 5*time.Second {
		t.Fatalf("a write someone edited: %v after %s", err, time.Since(begin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if err := f.a.VerifyTraffic(ctx, VerifyInput{Object: helloRef, Desired: desired, Generation: 1}); errType(err) != ErrNotVisible {
		t.Fatalf("a round of checks after the edit: %v", err)
	}
}

// A waiting activity's first beat comes at half its heartbeat timeout, so a
// wait that ends sooner costs Temporal no heartbeat call; never later than
// that, so the timeout has half its length to spare.
func TestFirstBeat(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{
		0:                HeartbeatEvery,
		3 * time.Second:  HeartbeatEvery,
		4 * time.Second:  HeartbeatEvery,
		10 * time.Second: 5 * time.Second,
		time.Minute:      30 * time.Second,
	} {
		if got := firstBeat(timeout); got != want {
			t.Errorf("heartbeat timeout %s: first beat %s, want %s", timeout, got, want)
		}
	}
}
