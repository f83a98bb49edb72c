package workflows

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/eventsink"
)

func types(s *eventsink.Sink) []string {
	evs := s.Events()
	sort.Slice(evs, func(i, j int) bool { return seq(evs[i]) < seq(evs[j]) })
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = strings.TrimPrefix(e.Type(), events.ProgressPrefix)
	}
	return out
}

func (h *harness) withSink(t *testing.T) *eventsink.Sink {
	s := eventsink.New(t)
	sender, err := events.NewSender(s.URL, `{"extensions":{"cluster":"test"}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.env.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: h.k}, Defaults: config.BuiltinDefaults(), WatchLimit: testWatch, Events: sender})
	return s
}

func TestProgressEventsFollowTheRollout(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationGates: "100"}, true)...)
	s := h.withSink(t)
	h.at(5*time.Minute, func() { h.update(api.CommandPause, api.Command{By: "ann", Reason: "look"}) })
	h.at(6*time.Minute, func() { h.update(api.CommandResume, api.Command{By: "ann"}) })
	h.at(7*time.Minute, func() { h.update(api.CommandPromote, api.Command{By: "ann", Reason: "go"}) })
	h.run("hello-00002")
	if got := strings.Join(types(s), ","); got != "started,step,step,paused,resumed,promoted,step,succeeded" {
		t.Fatalf("progress events: %s", got)
	}
	evs := s.Events()
	ids := map[string]bool{}
	for _, e := range evs {
		ids[e.ID()] = true
		if e.Source() != "/sluice/rollouts/default/service/hello" || e.Subject() != "hello-00002" || e.Extensions()["cluster"] != "test" {
			t.Fatalf("event attributes: %s", e)
		}
		var d events.ProgressData
		if err := e.DataAs(&d); err != nil || d.WorkflowID != "rollout/default/service/hello" {
			t.Fatalf("event data: %+v, %v", d, err)
		}
		if e.Type() == events.ProgressPaused && (d.By != "ann" || d.Reason != "look" || d.Weight != 50) {
			t.Fatalf("paused event data: %+v", d)
		}
	}
	if len(ids) != len(evs) {
		t.Fatalf("event IDs repeat: %d distinct of %d", len(ids), len(evs))
	}
}

// emits counts how progress events went out: tries by local activity, and
// attempts of EmitProgress activities.
type emits struct{ local, remote int }

func (h *harness) countEmits() *emits {
	c := &emits{}
	h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if info.ActivityType.Name == api.ActivityEmitProgress {
			c.local++
		}
	})
	h.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == api.ActivityEmitProgress {
			c.remote++
		}
	})
	return c
}

// Progress events go out from local activities (progressLocal), one at a
// time and in order: no activity of their own is scheduled, so Temporal
// dispatches nothing and records no task for them. A worker keeping the
// way back open (KeepRollbackOpen, the default setting) sends them by
// activity, the previous release's way, so that release can replay what it
// starts.
func TestProgressEventsByLocalActivity(t *testing.T) {
	for _, tc := range []struct {
		name          string
		opts          worker.Options
		local, remote int
	}{
		{"every change", worker.Options{}, 5, 0},
		{"the way back kept open", worker.Options{PreferredVersionProvider: KeepRollbackOpen}, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, helloObjects(nil, true)...)
			h.env.SetWorkerOptions(tc.opts)
			s := h.withSink(t)
			n := h.countEmits()
			h.run("hello-00002")
			if got := strings.Join(types(s), ","); got != "started,step,step,step,succeeded" {
				t.Fatalf("progress events: %s", got)
			}
			if n.local != tc.local || n.remote != tc.remote {
				t.Fatalf("%d local tries and %d activities, want %d and %d", n.local, n.remote, tc.local, tc.remote)
			}
		})
	}
}

// A sink that fails the quick try gets that event and the rest of the run's
// by activity, retried until it answers: none is lost, none out of order.
func TestProgressEventsOutliveAFailingSink(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	var mu sync.Mutex
	var got []string
	refuse := 2
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if refuse > 0 {
			refuse--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		got = append(got, strings.TrimPrefix(req.Header.Get("Ce-Type"), events.ProgressPrefix))
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	sender, err := events.NewSender(srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.env.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: h.k}, Defaults: config.BuiltinDefaults(), WatchLimit: testWatch, Events: sender})
	n := h.countEmits()
	h.run("hello-00002")
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, ",") != "started,step,step,step,succeeded" {
		t.Fatalf("the sink got %v", got)
	}
	// One quick try (refused), then activities: two attempts for the
	// first event (one refused), one for each of the four after it.
	if n.local != 1 || n.remote != 2+4 {
		t.Fatalf("%d local tries and %d activity attempts, want 1 and 6", n.local, n.remote)
	}
}

func TestVerificationWaitsForStatus(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationVerifyTimeout: "1m"}, true)...)
	h.k.Stall = "hello-00002"
	h.at(17*time.Second, func() {
		h.k.Stall = ""
		h.k.SetFrozen(false) // status catches up
	})
	h.run("hello-00002")
	st := h.status()
	if st.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	// Verification of the first step ended once the status caught up at
	// 17s, and the hold of 1m counted from there.
	if hold := st.Steps[1].StartedAt.Sub(st.Steps[0].StartedAt); hold < time.Minute+17*time.Second || hold > time.Minute+25*time.Second {
		t.Fatalf("step 2 started %s after step 1, want hold 1m after verification at ~17s", hold)
	}
}

func TestDeleteHintEndsRolloutOnlyIfGone(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	h.at(20*time.Second, func() {
		// A spoofed or stale delete hint: the Service is still there.
		h.env.SignalWorkflow(api.SignalTargetDeleted, api.ObjectHint{Kind: "Service", Name: "hello"})
	})
	h.at(40*time.Second, func() {
		_ = h.k.ServingV1().Services(ns).Delete(context.Background(), "hello", metav1.DeleteOptions{})
		h.env.SignalWorkflow(api.SignalTargetDeleted, api.ObjectHint{Kind: "Service", Name: "hello"})
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeFailed || res.Reason != "Service default/hello was deleted during the rollout" {
		t.Fatalf("result %+v", res)
	}
	if ended := res.EndedAt.Sub(h.status().StartedAt); ended < 40*time.Second || ended > 41*time.Second {
		t.Fatalf("ended %s after start: the first hint must not end it, the second must at once", ended)
	}
}

func seq(e cloudevents.Event) int {
	n, _ := strconv.Atoi(fmt.Sprint(e.Extensions()["sequence"]))
	return n
}

// A policy the worker refuses (here a misspelt gate) ends the rollout
// Failed before any traffic moves, and says why in the status and in a
// progress event, where a service owner looks.
func TestRefusedPolicyIsToldInAProgressEvent(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{"sluice.dev/gate": "100"}, true)...)
	s := h.withSink(t)
	h.run("hello-00002")
	res := h.result()
	want := "sluice.dev/gate: is not a sluice annotation, and sluice would ignore it; did you mean sluice.dev/gates?"
	if res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, want) {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if got := strings.Join(types(s), ","); got != "failed" {
		t.Fatalf("progress events: %s", got)
	}
	var d events.ProgressData
	if err := s.Events()[0].DataAs(&d); err != nil || !strings.Contains(d.Reason, want) {
		t.Fatalf("failed event's reason %q (%v)", d.Reason, err)
	}
	// Its one write is the mark that keeps the candidate's later events from
	// starting the same refusal again; the traffic is as it was.
	svc, err := h.k.ServingV1().Services(ns).Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Annotations[config.AnnotationEnded]; got != "hello-00002=Failed" {
		t.Fatalf("%s = %q", config.AnnotationEnded, got)
	}
	if got := knative.FormatTraffic(svc.Spec.Traffic); got != "hello-00001=90%, hello-00000=10% (tag legacy), hello-00001=0% (tag current)" {
		t.Fatalf("traffic after the refusal: %s", got)
	}
}
