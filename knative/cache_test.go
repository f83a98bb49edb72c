package knative_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// The cache answers a Route-mode target as the API server does, and only
// for a Revision of a template it has seen; the rest go to the API server.
func TestTargetCacheReadsAsTheAPIServerDoes(t *testing.T) {
	api := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", Generation: 3,
		Annotations: map[string]string{config.AnnotationRollout: "enabled", config.AnnotationRoute: "api-route"}}}
	route := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-route", Generation: 1},
		Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{knativefake.Target("api-00002", 100, "")}}}
	k := knativefake.New(api, route)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := knative.Client{Serving: k}
	cache, err := knative.NewTargetCache(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}
	want, err := c.ReadTarget(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		generation int64
		cached     bool
	}{{3, true}, {2, true}, {4, false}, {0, false}} {
		k.ClearActions()
		got, cached, err := cache.ReadTarget(ctx, ref, tc.generation)
		if err != nil || cached != tc.cached || got.Object != want.Object || got.ConfigGeneration != 3 ||
			knative.FormatTraffic(got.Live.Spec) != knative.FormatTraffic(want.Live.Spec) || got.Annotations[config.AnnotationRoute] != "api-route" {
			t.Errorf("template %d: cached %v, %+v, %v; want cached %v, %+v", tc.generation, cached, got, err, tc.cached, want)
		}
		if reads := len(k.Actions()); (reads == 0) != tc.cached {
			t.Errorf("template %d: %d API calls, cached %v", tc.generation, reads, cached)
		}
	}
	// Not in the cache at all: the API server's answer, error included.
	if _, cached, err := cache.ReadTarget(ctx, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "nope"}, 1); cached || err == nil {
		t.Errorf("a Service that is not there: cached %v, error %v", cached, err)
	}
}

// The cache keeps a Service's annotations but not kubectl's copy of the
// whole manifest in last-applied-configuration, which would double what it
// holds of every Service applied with kubectl.
func TestTargetCacheDropsLastApplied(t *testing.T) {
	svc := knativefake.Service(ns, "web", map[string]string{corev1.LastAppliedConfigAnnotation: `{"apiVersion":"serving.knative.dev/v1","kind":"Service"}`},
		knativefake.Target("web-00001", 100, ""))
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Generation: 1, Annotations: svc.Annotations}}
	k := knativefake.New(svc, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache, err := knative.NewTargetCache(ctx, knative.Client{Serving: k}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, cached, err := cache.ReadTarget(ctx, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "web"}, 1)
	if err != nil || !cached {
		t.Fatalf("cached %v, %v", cached, err)
	}
	if _, kept := got.Annotations[corev1.LastAppliedConfigAnnotation]; kept {
		t.Error("the cache holds kubectl's last-applied copy of the Service")
	}
	if got.Annotations[config.AnnotationRollout] != "enabled" {
		t.Errorf("the cache lost the Service's own annotations: %v", got.Annotations)
	}
}

// Routes are followed only once a Configuration names one: a cluster of
// Service targets never lists or watches them, and the first Route target
// is read from the API server until the Route informer has its first list,
// then from the cache.
func TestTargetCacheStartsRoutesForARouteTarget(t *testing.T) {
	k := knativefake.New(knativefake.Service(ns, "web", nil, knativefake.Target("web-00001", 100, "")),
		&servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Generation: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cache, err := knative.NewTargetCache(ctx, knative.Client{Serving: k}, nil)
	if err != nil {
		t.Fatal(err)
	}
	routeCalls := func() int {
		n := 0
		for _, a := range k.Actions() {
			if a.GetResource().Resource == "routes" && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
				n++
			}
		}
		return n
	}
	if n := routeCalls(); n != 0 {
		t.Fatalf("with only Service targets the cache listed or watched Routes %d times", n)
	}
	if _, ok := cache.Follow(knative.ObjectRef{Namespace: ns, Kind: knative.KindRoute, Name: "api-route"}); ok {
		t.Fatal("the cache follows a Route it does not hold")
	}

	route := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-route", Generation: 1},
		Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{knativefake.Target("api-00001", 100, "")}}}
	if _, err := k.ServingV1().Routes(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", Generation: 2,
		Annotations: map[string]string{config.AnnotationRollout: "enabled", config.AnnotationRoute: "api-route"}}}
	if _, err := k.ServingV1().Configurations(ns).Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}
	for {
		got, cached, err := cache.ReadTarget(ctx, ref, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got.Object.Name != "api-route" || knative.FormatTraffic(got.Live.Spec) != "api-00001=100%" {
			t.Fatalf("the Route target read as %+v", got)
		}
		if cached {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the cache never took the Route target's Route")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if routeCalls() == 0 {
		t.Error("the cache read a Route target's Route from its cache without listing Routes")
	}
	w, ok := cache.Follow(knative.ObjectRef{Namespace: ns, Kind: knative.KindRoute, Name: "api-route"})
	if !ok {
		t.Fatal("the cache does not follow the Route of a Route target")
	}
	w.Stop()
}
