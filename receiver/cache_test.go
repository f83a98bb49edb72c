package receiver

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/serviceerror"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
)

// withCache gives the receiver its informers' caches, as `sluice receiver`
// does, and forgets the API calls their first lists made.
func (e *env) withCache() *env {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	tc, err := knative.NewTargetCache(ctx, e.rcv.Knative, []string{"default", "shop"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.rcv.Targets = tc
	e.k.ClearActions()
	return e
}

// gets lists the API reads made since the caches synced.
func (e *env) gets() []string {
	var out []string
	for _, a := range e.k.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

func (e *env) reads(from string) float64 {
	return testutil.ToFloat64(e.rcv.Metrics.reads.WithLabelValues(from))
}

// An event about a Revision of a target that did not opt in is answered
// from the caches: no API read, no Temporal call.
func TestIrrelevantEventCostsNoCall(t *testing.T) {
	objs := helloObjects()
	objs[0].(*servingv1.Service).Annotations["sluice.dev/rollout"] = "disabled"
	e := newEnv(t, objs...).withCache()
	for _, f := range []string{"resource/02-revision-add.json", "resource/03-revision-update-ready-unknown.json", "resource/04-revision-update-ready-true.json"} {
		code, msg := e.replay(f, nil)
		if code != http.StatusOK || !strings.Contains(msg, "is not opted in") {
			t.Fatalf("%s: %d %s", f, code, msg)
		}
	}
	if got := e.gets(); len(got) != 0 {
		t.Fatalf("API reads for events about a target that did not opt in: %v", got)
	}
	if calls := e.temporal.Calls(); len(calls) != 0 {
		t.Fatalf("Temporal calls: %v", calls)
	}
	if n := e.reads("cache"); n != 3 {
		t.Fatalf("reads from the cache: %v, want 3", n)
	}
}

// A new candidate of an opted-in target costs one Temporal call and, the
// event carrying the Revision, no API read.
func TestNewCandidateFromTheCache(t *testing.T) {
	e := newEnv(t, helloObjects()...).withCache()
	code, msg := e.replay("resource/02-revision-add.json", nil)
	if code != http.StatusAccepted || !strings.Contains(msg, "offered hello-00002") {
		t.Fatalf("%d %s", code, msg)
	}
	if got := e.gets(); len(got) != 0 {
		t.Fatalf("API reads: %v", got)
	}
	if got := strings.Join(e.temporal.Calls(), "; "); got != "start rollout/default/service/hello" {
		t.Fatalf("Temporal calls: %s", got)
	}
}

// Where the caches may be behind, the API server answers: a Revision of a
// template the cached Configuration has not reached, and a Service whose
// opt-in reached its Configuration but not the cached Service yet.
func TestCacheBehindReadsTheAPIServer(t *testing.T) {
	objs := helloObjects()
	objs[1].(*servingv1.Configuration).Generation = 1 // the Revision runs template 2
	e := newEnv(t, objs...).withCache()
	if code, msg := e.replay("resource/02-revision-add.json", nil); code != http.StatusAccepted {
		t.Fatalf("a Revision newer than the cache: %d %s", code, msg)
	}
	if got := e.gets(); len(got) == 0 || e.reads("api") != 1 {
		t.Fatalf("a Revision newer than the cache was not read from the API server: %v", got)
	}

	e = newEnv(t, helloObjects()...).withCache()
	ctx := context.Background()
	set := func(obj runtime.Object, rollout string) {
		switch o := obj.(type) {
		case *servingv1.Service:
			o.Annotations["sluice.dev/rollout"] = rollout
		case *servingv1.Configuration:
			o.Annotations = map[string]string{"sluice.dev/rollout": rollout}
		}
	}
	// A cached Service that does not opt in, and its Configuration that
	// does (Knative copies a Service's annotations to it): one of the two
	// is behind, and the API server says which.
	svc, _ := e.k.ServingV1().Services("default").Get(ctx, "hello", metav1.GetOptions{})
	set(svc, "disabled")
	_, _ = e.k.ServingV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{})
	cfg, _ := e.k.ServingV1().Configurations("default").Get(ctx, "hello", metav1.GetOptions{})
	set(cfg, "enabled")
	_, _ = e.k.ServingV1().Configurations("default").Update(ctx, cfg, metav1.UpdateOptions{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Once both updates are in the caches, they disagree.
		_, cached, _ := e.rcv.Targets.ReadTarget(ctx, knative.TargetRef{Namespace: "default", Kind: knative.KindService, Name: "hello"}, 2)
		if !cached {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the caches did not see both updates in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.k.ClearActions()
	before := e.reads("api")
	code, msg := e.replay("resource/02-revision-add.json", nil)
	if code != http.StatusOK || !strings.Contains(msg, "is not opted in") || e.reads("api") != before+1 {
		t.Fatalf("an opt-in the cached Service has not seen: %d %s (API reads %v)", code, msg, e.reads("api")-before)
	}
}

// While the gate says Temporal is unreachable, an event that needs it is
// answered 503 at once, with no call; the next good probe opens it again.
func TestGateAnswersAtOnceWhileTemporalIsDown(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	var up bool
	e.rcv.Gate = &Gate{Check: func(context.Context) error {
		if up {
			return nil
		}
		return serviceerror.NewUnavailable("connection refused")
	}}
	e.rcv.Gate.probe(context.Background())
	began := time.Now()
	code, msg := e.replay("resource/02-revision-add.json", nil)
	if took := time.Since(began); code != http.StatusServiceUnavailable || !strings.Contains(msg, "Temporal unavailable") || took > 100*time.Millisecond {
		t.Fatalf("%d %s in %s", code, msg, took)
	}
	if calls := e.temporal.Calls(); len(calls) != 0 {
		t.Fatalf("Temporal calls while the gate is closed: %v", calls)
	}
	up = true
	e.rcv.Gate.probe(context.Background())
	if code, msg := e.replay("resource/02-revision-add.json", nil); code != http.StatusAccepted {
		t.Fatalf("after Temporal came back: %d %s", code, msg)
	}
	// A call that finds Temporal unavailable closes the gate until the next
	// probe, so the events behind it do not each wait to find out.
	e.rcv.Gate.Failed(serviceerror.NewUnavailable("connection reset"))
	if err := e.rcv.Gate.Err(); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("gate after a failed call: %v", err)
	}
}
