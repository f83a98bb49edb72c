package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/apis/autoscaling"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/test/knativefake"
)

// capacityObjects: a Service on hello-00001 at min-scale 8 (8 Ready pods)
// whose new Revision hello-00002 asks for min-scale 8 too.
func capacityObjects(ann map[string]string) []runtime.Object {
	base := map[string]string{config.AnnotationHold: "1m", config.AnnotationDeadline: "1h"}
	for k, v := range ann {
		base[k] = v
	}
	stable, cand := knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, true)
	for _, r := range []*struct{ ann *map[string]string }{{&stable.Annotations}, {&cand.Annotations}} {
		*r.ann = map[string]string{autoscaling.MinScaleAnnotationKey: "8"}
	}
	eight := int32(8)
	stable.Status.ActualReplicas = &eight
	return []runtime.Object{knativefake.Service(ns, "hello", base, knativefake.Target("hello-00001", 100, "")), stable, cand}
}

// checkPods holds the capacity invariants over every sample the fake took:
// never more than limit pods in all and, with shares, the candidate's share
// never above its share of the stable's 8 pods (to the nearest percent).
//
// The samples before sluice first bounds the candidate are skipped: until
// then the candidate runs what its template asks for.
func checkPods(t *testing.T, h *harness, limit int32, shares bool) (peak int32) {
	t.Helper()
	bounded := false
	for i, s := range h.k.SamplesNow() {
		if bounded = bounded || s.Wrote == "hello-00002"; !bounded {
			continue
		}
		total := s.Pods["hello-00001"] + s.Pods["hello-00002"]
		peak = max(peak, total)
		if total > limit {
			t.Errorf("sample %d: %d pods (%v), limit %d", i, total, s.Pods, limit)
		}
		if w := s.Traffic["hello-00002"]; shares && w*8 > int64(s.Pods["hello-00002"])*100+4 {
			t.Errorf("sample %d: the candidate has %d%% of the traffic on %d of 8 pods", i, w, s.Pods["hello-00002"])
		}
	}
	return peak
}

func TestCapacityAvailabilityStagesPodsWithTraffic(t *testing.T) {
	h := newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "availability"})...)
	sink := h.withSink(t)
	var mid api.Status
	h.at(150*time.Second, func() { mid = h.status() })
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
	// Every step event says the pods: at the last, the candidate's 8.
	var last *events.ProgressPods
	for _, e := range sink.Events() {
		var d events.ProgressData
		if err := e.DataAs(&d); err != nil || d.Pods == nil || d.Pods.StableFrom != 8 {
			t.Fatalf("%s: pods %+v (%v), want them with the stable's 8", e.Type(), d.Pods, err)
		}
		if e.Type() == events.ProgressStep {
			last = d.Pods
		}
	}
	if last == nil || last.Candidate != 8 {
		t.Errorf("the last step event's pods %+v, want the candidate's 8", last)
	}
	if peak := checkPods(t, h, 9, true); peak != 9 {
		t.Errorf("peak %d pods, want 9 (8 and a surge of 1)", peak)
	}
	// 8 stages of one pod: 13%, 25%, ... 100%.
	if c := mid.Capacity; c == nil || c.StablePods != 8 || len(c.Stages) != 8 || c.Stages[0].Weight != 13 || c.Stages[0].Candidate != 1 || c.Stages[0].Stable != 7 {
		t.Fatalf("capacity plan in the status: %+v", mid.Capacity)
	}
	// Both Revisions' pods are read as the stages go, the stable's too
	// (each stage waits for it to release the last one's).
	if c := mid.Capacity; c.StablePodsNow < 1 || c.CandidatePods < 1 || c.StablePodsNow+c.CandidatePods > 9 {
		t.Errorf("pods in the status mid-rollout: candidate %d, stable %d", c.CandidatePods, c.StablePodsNow)
	}
	if len(mid.Steps) != 8 || mid.Steps[1].Weight != 25 {
		t.Fatalf("steps derived from pods: %+v", mid.Steps)
	}
	// At the end the candidate serves everything on its template's 8 pods.
	if got := h.k.Pods(ns, "hello-00002"); got != 8 {
		t.Errorf("candidate runs %d pods at the end, want 8", got)
	}
	if got := h.k.Pods(ns, "hello-00001"); got != 0 {
		t.Errorf("stable runs %d pods at the end, want 0 (no traffic, in reserve)", got)
	}
}

func TestCapacityResourceNeverExceedsTheStablesCount(t *testing.T) {
	h := newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "resource", config.AnnotationSteps: "25,50,100"})...)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
	// The resource strategy trades the candidate's headroom for the count:
	// at the last stage it takes all the traffic one pod short.
	if peak := checkPods(t, h, 8, false); peak != 8 {
		t.Errorf("peak %d pods, want 8", peak)
	}
}

// A stage whose pods do not come pauses with the reason; an abort then gives
// the stable its 8 pods back before its traffic.
func TestCapacityStageWithoutPodsPausesAndAbortRestoresTheStableFirst(t *testing.T) {
	h := newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "availability",
		config.AnnotationCapacityTimeout: "2m"})...)
	h.k.SetPodCap("hello-00002", 2)
	var paused api.Status
	h.at(10*time.Minute, func() { paused = h.status() })
	// The pods come after all, just before the abort: the candidate's
	// third pod, bounded for the stage that never moved traffic, serves
	// nothing and goes before the stable's pods come back.
	h.at(10*time.Minute+30*time.Second, func() { h.k.SetPodCap("hello-00002", -1) })
	h.at(11*time.Minute, func() { h.update(api.CommandAbort, api.Command{By: "ops", Reason: "no GPUs"}) })
	h.run("hello-00002")
	if !paused.Paused || !strings.Contains(paused.PauseReason, "stage 3 of 8: hello-00002 has 2 of the 3 Ready pods it needs after 2m0s") {
		t.Fatalf("while the pods do not come: paused %v: %s", paused.Paused, paused.PauseReason)
	}
	if paused.Weight != 25 {
		t.Errorf("weight while paused %d, want 25 (stage 2's)", paused.Weight)
	}
	if res := h.result(); res.Outcome != api.OutcomeAborted {
		t.Fatalf("result %+v", res)
	}
	// A rollback brings the stable's pods back before its traffic, so it
	// runs beside the candidate's (the 2 its 25% needs) for a moment.
	checkPods(t, h, 10, true)
	// The stable had its 8 pods back before any traffic returned to it.
	samples := h.k.SamplesNow()
	for i, s := range samples {
		if s.Traffic["hello-00001"] == 100 && i > 0 && samples[i-1].Traffic["hello-00001"] < 100 && s.Pods["hello-00001"] < 8 {
			t.Errorf("sample %d: the stable took all the traffic back on %d pods", i, s.Pods["hello-00001"])
		}
	}
	if got := h.k.Pods(ns, "hello-00001"); got != 8 {
		t.Errorf("stable runs %d pods after the abort, want 8", got)
	}
	if got := h.k.Pods(ns, "hello-00002"); got != 0 {
		t.Errorf("candidate runs %d pods after the abort, want 0", got)
	}
}

func TestCapacityTimeoutRollsBackByPolicy(t *testing.T) {
	h := newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "availability",
		config.AnnotationCapacityTimeout: "1m", config.AnnotationCapacityOnTimeout: "rollback"})...)
	h.k.SetPodCap("hello-00002", 0)
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "stage 1 of 8: hello-00002 has 0 of the 1 Ready pods it needs after 1m0s") {
		t.Fatalf("result %+v", res)
	}
	checkPods(t, h, 9, true)
}

// Someone else's edit of a Revision's scale bounds mid-rollout is not
// overwritten: the next stage pauses and says what it found; resume writes
// the stage's bounds over it and the rollout goes on.
func TestCapacityScaleDriftPausesAndResumeGoesOn(t *testing.T) {
	h := newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "availability"})...)
	h.at(90*time.Second, func() {
		patch := []byte(`{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"5","autoscaling.knative.dev/max-scale":"5"}}}`)
		if _, err := h.k.ServingV1().Revisions(ns).Patch(context.Background(), "hello-00002", k8stypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
	})
	var paused api.Status
	h.at(10*time.Minute, func() { paused = h.status() })
	h.at(11*time.Minute, func() { h.update(api.CommandResume, api.Command{By: "ops", Reason: "mine was a mistake"}) })
	h.run("hello-00002")
	if !paused.Paused || !strings.Contains(paused.PauseReason,
		`the scale bounds of Revision default/hello-00002 were changed by someone else: min "5" max "5", where sluice last wrote min "2" max "2"`) {
		t.Fatalf("after the edit: paused %v: %s", paused.Paused, paused.PauseReason)
	}
	if paused.Weight != 25 {
		t.Errorf("weight while paused %d, want 25 (stage 2's)", paused.Weight)
	}
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("after resume: %+v", res)
	}
	if got := h.k.Pods(ns, "hello-00002"); got != 8 {
		t.Errorf("candidate runs %d pods at the end, want 8", got)
	}
}

// Analysis failing at a stage rolls back in the capacity order: the
// stable's bounds and pods first, then its traffic, then the candidate's
// bounds.
func TestCapacityAnalysisFailureRollsBackStableCapacityFirst(t *testing.T) {
	h := withAnalysis(newHarness(t, capacityObjects(map[string]string{config.AnnotationCapacity: "availability",
		config.AnnotationAnalysis: successDoc})...), badAt(9, 0.5), ok200) // a few stages in
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "analysis: success-rate failed once") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if st := h.status(); st.StepNumber < 2 {
		t.Fatalf("rolled back at step %d, want a later stage", st.StepNumber)
	} else {
		t.Logf("rolled back at step %d of %d", st.StepNumber, st.StepCount)
	}
	samples := h.k.SamplesNow()
	back, released := -1, -1
	for i, s := range samples {
		if back < 0 && i > 0 && s.Traffic["hello-00001"] == 100 && samples[i-1].Traffic["hello-00001"] < 100 {
			back = i
			if s.Pods["hello-00001"] != 8 {
				t.Errorf("sample %d: the stable took its traffic back on %d pods, want its 8", i, s.Pods["hello-00001"])
			}
		}
		if back >= 0 && released < 0 && s.Wrote == "hello-00002" {
			released = i
		}
	}
	if back < 0 || released < 0 {
		t.Fatalf("no traffic back (%d) or no release of the candidate after it (%d) in %d samples", back, released, len(samples))
	}
	checkPods(t, h, 11, true)
	if got := h.k.Pods(ns, "hello-00001"); got != 8 {
		t.Errorf("stable runs %d pods after the rollback, want 8", got)
	}
	if got := h.k.Pods(ns, "hello-00002"); got != 0 {
		t.Errorf("candidate runs %d pods after the rollback, want 0", got)
	}
}
