package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"knative.dev/serving/pkg/apis/autoscaling"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// TestCapacityRolloutOnRealServer runs a capacity rollout (availability,
// stages derived from the stable's 8 pods) on a real Temporal server: its
// history, with a scale write and a wait for pods per stage, is the one
// the replay test keeps.
func TestCapacityRolloutOnRealServer(t *testing.T) {
	s, ctx := startCapacityRollout(t, "1s")
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result: %+v, %v", res, err)
	}
	st := s.status()
	if st.Capacity == nil || st.Capacity.StablePods != 8 || len(st.Capacity.Stages) != 2 || st.Capacity.Stages[0].Weight != 50 {
		t.Fatalf("capacity plan %+v, want 2 stages of 4 pods from 8", st.Capacity)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00002=100%" {
		t.Fatalf("final traffic: %s", got)
	}
	if got := s.k.Pods(ns, "hello-00002"); got != 8 {
		t.Errorf("candidate runs %d pods at the end, want its template's 8", got)
	}
	recordHistory(t, s.temporal, "rollout-capacity.json")
}

// TestCapacityAbortOnRealServer aborts a capacity rollout at its first
// stage on a real Temporal server: the stable's bounds and pods come back
// first, then its traffic, and the candidate — no longer routed — gets its
// template's bounds only once Knative has put it in reserve. Its history is
// the one the replay test keeps for a capacity rollback.
func TestCapacityAbortOnRealServer(t *testing.T) {
	s, ctx := startCapacityRollout(t, "10m")
	eventually(t, 30*time.Second, "the first stage's hold", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseHolding && st.HoldLeftAt > 0
	})
	if got := s.k.Pods(ns, "hello-00001"); got != 4 {
		t.Fatalf("the stable runs %d pods at the first stage, want 4", got)
	}
	if _, err := s.ctl.Send(ctx, hello, api.CommandAbort, "latency up"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeAborted {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=100%, hello-00001=0% (tag current)" {
		t.Fatalf("traffic after abort: %s", got)
	}
	if got := s.k.Pods(ns, "hello-00001"); got != 8 {
		t.Errorf("the stable runs %d pods after the abort, want its 8", got)
	}
	// The rollback's activities, in order, after the abort.
	var after []string
	it := s.temporal.GetWorkflowHistory(ctx, api.RolloutID(hello), "", false, 0)
	aborted := false
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetWorkflowExecutionUpdateAcceptedEventAttributes() != nil {
			aborted = true
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && aborted {
			var summary string
			_ = converter.GetDefaultDataConverter().FromPayload(ev.GetUserMetadata().GetSummary(), &summary)
			after = append(after, summary)
		}
	}
	want := []string{
		"scale hello-00001 to min 8 max (template default)",
		"await 8 Ready pods of hello-00001",
		"roll back to hello-00001",
		"await hello-00002 in reserve",
		"scale hello-00002 to min 8 max (template default)",
	}
	if got := strings.Join(after, "; "); !strings.HasPrefix(got, strings.Join(want, "; ")) {
		t.Fatalf("the rollback's activities:\n %s\nwant them to begin:\n %s", got, strings.Join(want, "; "))
	}
	recordHistory(t, s.temporal, "rollout-capacity-abort.json")
}

// startCapacityRollout starts the rollout of hello-00002 in capacity mode
// (availability, a surge of 4, the given hold) from hello-00001 at 8 Ready
// pods; both Revisions' templates ask for min-scale 8.
func startCapacityRollout(t *testing.T, hold string) (*stack, context.Context) {
	t.Helper()
	objs := helloService(map[string]string{config.AnnotationCapacity: "availability", config.AnnotationCapacitySurge: "4", config.AnnotationHold: hold})
	eight := int32(8)
	stable, cand := knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, true)
	stable.Annotations = map[string]string{autoscaling.MinScaleAnnotationKey: "8"}
	cand.Annotations = map[string]string{autoscaling.MinScaleAnnotationKey: "8"}
	stable.Status.ActualReplicas = &eight
	s := startStack(t, objs[0], stable, cand)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	return s, ctx
}
