package knative_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// A wait on a Service's traffic through a cache that holds it opens no
// watch of its own: it sees the write's status come through the informers,
// and a deletion too. A namespace the cache does not hold is watched on the
// API server as before.
func TestTrafficWaitFollowsTheCache(t *testing.T) {
	k := knativefake.New(knativefake.Service(ns, "web", nil, knativefake.Target("web-00001", 100, "")),
		knativefake.Service("elsewhere", "api", nil, knativefake.Target("api-00001", 100, "")))
	k.SetFrozen(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cache, err := knative.NewTargetCache(ctx, knative.Client{Serving: k}, []string{ns})
	if err != nil {
		t.Fatal(err)
	}
	c := knative.Client{Serving: k, Feed: cache}
	web := knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "web"}
	live, err := c.ReadTraffic(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	want := []servingv1.TrafficTarget{knativefake.Target("web-00001", 50, ""), knativefake.Target("web-00002", 50, "")}
	wrote, err := c.PatchTraffic(ctx, web, live, want)
	if err != nil {
		t.Fatal(err)
	}
	k.ClearActions()
	type result struct {
		reached bool
		err     error
	}
	done := make(chan result, 1)
	seen := make(chan knative.Live, 16)
	go func() {
		reached, err := c.WatchTraffic(ctx, web, wrote.ResourceVersion, func(l knative.Live, gone bool) bool {
			seen <- l
			return !gone && l.Lacks(web, want, wrote.Generation) == ""
		})
		done <- result{reached, err}
	}()
	// The first state is the cache's, which does not show the write yet.
	select {
	case l := <-seen:
		if l.Lacks(web, want, wrote.Generation) == "" {
			t.Fatalf("the status showed the write before Knative reconciled it: %+v", l)
		}
	case r := <-done:
		t.Fatalf("the wait ended before reconciliation: %+v", r)
	}
	k.SetFrozen(false) // Knative writes the status
	if r := <-done; !r.reached || r.err != nil {
		t.Fatalf("the wait ended with reached %v, error %v; want the reconciled status", r.reached, r.err)
	}
	for _, a := range k.Actions() {
		if a.GetVerb() == "watch" || a.GetVerb() == "get" {
			t.Errorf("the wait went to the API server: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}

	// A deletion ends a wait as the API server's watch would.
	gone := make(chan bool, 1)
	go func() {
		_, _ = c.WatchTraffic(ctx, web, "", func(_ knative.Live, g bool) bool {
			if g {
				gone <- true
			}
			return g
		})
	}()
	time.Sleep(100 * time.Millisecond) // the wait follows before the delete
	if err := k.ServingV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-ctx.Done():
		t.Fatal("the deletion never reached the wait")
	}

	// Outside the cache's namespaces: a watch on the API server.
	k.ClearActions()
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	_, _ = c.WatchTraffic(short, knative.ObjectRef{Namespace: "elsewhere", Kind: knative.KindService, Name: "api"}, "1",
		func(knative.Live, bool) bool { return false })
	watched := false
	for _, a := range k.Actions() {
		watched = watched || (a.GetVerb() == "watch" && a.GetNamespace() == "elsewhere")
	}
	if !watched {
		t.Errorf("a Service outside the cache's namespaces was not watched on the API server: %v", k.Actions())
	}
}

// A follower that has not read holds only the newest state: the informer
// never waits on it, and what it reads next is the Service as it is now.
func TestFollowerKeepsTheNewestState(t *testing.T) {
	k := knativefake.New(knativefake.Service(ns, "web", nil, knativefake.Target("web-00001", 100, "")))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cache, err := knative.NewTargetCache(ctx, knative.Client{Serving: k}, nil)
	if err != nil {
		t.Fatal(err)
	}
	web := knative.ObjectRef{Namespace: ns, Kind: knative.KindService, Name: "web"}
	w, ok := cache.Follow(web)
	if !ok {
		t.Fatal("the cache of every namespace does not follow a Service")
	}
	defer w.Stop()
	c := knative.Client{Serving: k}
	for _, pct := range []int64{90, 80, 70} {
		live, err := c.ReadTraffic(ctx, web)
		if err != nil {
			t.Fatal(err)
		}
		if _, err = c.PatchTraffic(ctx, web, live, []servingv1.TrafficTarget{knativefake.Target("web-00001", pct, ""),
			knativefake.Target("web-00002", 100-pct, "")}); err != nil {
			t.Fatal(err)
		}
	}
	final, err := c.ReadTraffic(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	// A second follower, read at once, tells when the informer has passed
	// on the final state.
	eager, _ := cache.Follow(web)
	defer eager.Stop()
	for l := (knative.Live{}); l.ResourceVersion != final.ResourceVersion; {
		select {
		case ev := <-eager.ResultChan():
			l, _ = knative.LiveOf(ev.Object)
		case <-ctx.Done():
			t.Fatal("the informer never passed on the final state")
		}
	}
	ev := <-w.ResultChan()
	if l, _ := knative.LiveOf(ev.Object); l.ResourceVersion != final.ResourceVersion {
		t.Fatalf("the idle follower read version %s first, not the newest %s", l.ResourceVersion, final.ResourceVersion)
	}
	select {
	case more := <-w.ResultChan():
		t.Fatalf("after the newest state another came: %v", more)
	default:
	}
}
