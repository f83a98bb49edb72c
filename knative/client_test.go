package knative_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

const ns = "default"

func TestReadTarget(t *testing.T) {
	unnamed := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", Generation: 3,
		Annotations: map[string]string{config.AnnotationRollout: "enabled"}}}
	k := knativefake.New(knativefake.Service(ns, "hello", map[string]string{config.AnnotationRollout: "enabled"},
		knativefake.Target("hello-00001", 100, "")), unnamed)
	c := knative.Client{Serving: k}
	ctx := context.Background()

	svc, err := c.ReadTarget(ctx, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Object != (knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}) || svc.Configuration != "hello" ||
		knative.FormatTraffic(svc.Live.Spec) != "hello-00001=100%" || svc.Annotations[config.AnnotationRollout] != "enabled" {
		t.Fatalf("Service target = %+v", svc)
	}

	// An opted-in Configuration without its Route: the caller can still
	// see that it opted in, and why it cannot roll out.
	cfg, err := c.ReadTarget(ctx, knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"})
	if !errors.Is(err, knative.ErrNoRoute) || cfg.Annotations[config.AnnotationRollout] != "enabled" || cfg.ConfigGeneration != 3 {
		t.Fatalf("unnamed Route: target %+v, error %v", cfg, err)
	}

	_, err = c.ReadTarget(ctx, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "gone"})
	if !apierrors.IsNotFound(err) || err.Error() != "Service default/gone not found" {
		t.Fatalf("missing Service: %v", err)
	}
	_, err = c.ReadTarget(ctx, knative.TargetRef{Namespace: ns, Kind: "Deployment", Name: "x"})
	if !errors.Is(err, knative.ErrUnknownKind) || !strings.Contains(err.Error(), `"Deployment"`) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestTargetOf(t *testing.T) {
	for _, tc := range []struct {
		labels knative.RevisionLabels
		want   knative.TargetRef
	}{
		{knative.RevisionLabels{Service: "hello", Configuration: "hello"}, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}},
		{knative.RevisionLabels{Configuration: "api"}, knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}},
		{knative.RevisionLabels{}, knative.TargetRef{}},
	} {
		if got := knative.TargetOf(ns, tc.labels); got != tc.want {
			t.Errorf("TargetOf(%+v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
}

func TestLiveLacks(t *testing.T) {
	o := knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}
	desired := []servingv1.TrafficTarget{knativefake.Target("a", 90, ""), knativefake.Target("b", 10, "")}
	shown := knative.Live{Name: "hello", Spec: desired, Status: desired, Generation: 4, ObservedGeneration: 4, Ready: true}
	for _, tc := range []struct {
		name string
		live func(l knative.Live) knative.Live
		want string
	}{
		{"shown", func(l knative.Live) knative.Live { return l }, ""},
		{"other object", func(l knative.Live) knative.Live { l.Name = "other"; return l }, "not reported yet"},
		{"status behind", func(l knative.Live) knative.Live { l.ObservedGeneration = 3; return l }, "status is at generation 3, waiting for 4"},
		{"not ready", func(l knative.Live) knative.Live { l.Ready, l.NotReady = false, "RoutesReady=False"; return l }, "traffic not ready: RoutesReady=False"},
		{"other split", func(l knative.Live) knative.Live {
			l.Status = []servingv1.TrafficTarget{knativefake.Target("a", 100, "")}
			return l
		}, "status shows a=100%, waiting for a=90%, b=10%"},
	} {
		if got := tc.live(shown).Lacks(o, desired, 4); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Lacks = %q, want %q", tc.name, got, tc.want)
		}
	}
	if r := shown.Routed(); len(r) != 2 || r[0] != "a" || r[1] != "b" {
		t.Errorf("Routed = %v", r)
	}
	behind := shown
	behind.ObservedGeneration = 3
	if r := behind.Routed(); r != nil {
		t.Errorf("Routed from a stale status = %v, want nil", r)
	}
}

func TestTargetServes(t *testing.T) {
	tgt := knative.Target{Live: knative.Live{Spec: []servingv1.TrafficTarget{
		knativefake.Target("a", 100, ""), knativefake.Target("b", 0, "candidate")}}}
	if !tgt.Serves("a") || tgt.Serves("b") || tgt.Serves("c") {
		t.Fatalf("Serves: a %v (want true), b at 0%% %v, c absent %v", tgt.Serves("a"), tgt.Serves("b"), tgt.Serves("c"))
	}
}

// Revisions come from the API server's watch cache; a cache that does not
// have the Revision the caller wants yet is read past, from etcd.
func TestRevisionsReadPastAStaleCache(t *testing.T) {
	k := knativefake.New(knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, true))
	var versions []string
	k.PrependReactor("list", "revisions", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv := a.(k8stesting.ListActionImpl).ListOptions.ResourceVersion
		versions = append(versions, rv)
		if rv == "0" {
			// The cache, a moment behind: the second Revision not in it yet.
			return true, &servingv1.RevisionList{Items: []servingv1.Revision{*knativefake.Revision(ns, "hello", 1, true)}}, nil
		}
		return false, nil, nil
	})
	c := knative.Client{Serving: k}
	ctx := context.Background()

	revs, err := c.Revisions(ctx, ns, "hello", "hello-00001")
	if err != nil || len(revs) != 1 || strings.Join(versions, ",") != "0" {
		t.Fatalf("wanting one the cache has: %d Revisions (%v), lists at resourceVersions %q; want 1 from the cache alone", len(revs), err, versions)
	}
	versions = nil
	revs, err = c.Revisions(ctx, ns, "hello", "hello-00002")
	if err != nil || revs["hello-00002"] == nil || strings.Join(versions, ",") != "0," {
		t.Fatalf("wanting one the cache lacks: %v (%v), lists at resourceVersions %q; want the cache, then a consistent read", revs, err, versions)
	}
}

// The API server answers a failed test of a JSON patch with a bare 422, as
// it would any patch it cannot apply: only a spec that has moved on since
// the read makes it a conflict.
func TestPatchTrafficTellsAFailedTestFromARefusal(t *testing.T) {
	k := knativefake.New(knativefake.Service(ns, "hello", nil, knativefake.Target("hello-00001", 100, "")))
	c := knative.Client{Serving: k}
	ctx := context.Background()
	ref := knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}
	read, err := c.ReadTraffic(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	k.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewGenericServerResponse(422, "", schema.GroupResource{}, "", "", 0, false)
	})
	want := []servingv1.TrafficTarget{knativefake.Target("hello-00001", 100, "current")}
	if _, err := c.PatchTraffic(ctx, ref, read, want); !apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		t.Fatalf("a 422 over an unchanged spec: %v, want the refusal as it came", err)
	}
	stale := read
	stale.Generation = 7 // read of a generation the spec has moved on from
	if _, err := c.PatchTraffic(ctx, ref, stale, want); !apierrors.IsConflict(err) {
		t.Fatalf("a 422 over a spec that moved on: %v, want a conflict", err)
	}
}
