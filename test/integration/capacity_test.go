package integration

import (
	"context"
	"testing"

	"knative.dev/serving/pkg/apis/autoscaling"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/workflows"
)

// TestCapacityRolloutOnRealServer runs a capacity rollout (availability,
// stages derived from the stable's 8 pods) on a real Temporal server: its
// history, with a scale write and a wait for pods per stage, is the one
// the replay test keeps.
func TestCapacityRolloutOnRealServer(t *testing.T) {
	objs := helloService(map[string]string{config.AnnotationCapacity: "availability", config.AnnotationCapacitySurge: "4", config.AnnotationHold: "1s"})
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
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != workflows.OutcomeSucceeded {
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
