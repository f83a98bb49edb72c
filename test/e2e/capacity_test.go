package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/requestsim"
	"github.com/sluicehq/sluice/test/testkit"
	"github.com/sluicehq/sluice/workflows/control"
)

// podSampler reads both Revisions' Deployments and the Service's served
// traffic every 100 ms, on Knative's own objects: the pods each Deployment
// runs (status.replicas) and has Ready, and each Revision's share.
type podSampler struct {
	mu    sync.Mutex
	stats podStats
	stop  chan struct{}
	done  chan struct{}
}

// podStats is what a podSampler saw.
type podStats struct {
	peak   int32
	peakAt string
	// midPeak is the peak while the candidate has a share, short of all.
	midPeak int32
	samples int
	// shareOver is the first sample where the candidate's share exceeded
	// its Ready pods' share of the stable's count (to the nearest percent).
	shareOver string
	// stableLow is the fewest Ready pods the stable had while the
	// candidate had a share; backReady the stable's Ready pods at the
	// first sample after that where the candidate had none again (-1: no
	// such sample), and back when that was.
	stableLow, backReady int32
	back                 string
}

func samplePods(t *testing.T, service, stable, candidate string, pods int32) *podSampler {
	s := &podSampler{stop: make(chan struct{}), done: make(chan struct{}), stats: podStats{stableLow: -1, backReady: -1}}
	kube := stk.Kube()
	ctx := context.Background()
	count := func(rev string) (running, ready int32) {
		list, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/revision=" + rev})
		if err != nil {
			return 0, 0
		}
		for _, d := range list.Items {
			running += d.Status.Replicas
			ready += d.Status.ReadyReplicas
		}
		return running, ready
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			sr, sready := count(stable)
			cr, cready := count(candidate)
			svc, err := stk.Serving.ServingV1().Services(ns).Get(ctx, service, metav1.GetOptions{})
			if err != nil {
				continue
			}
			var share int64
			for _, tr := range svc.Status.Traffic {
				if tr.RevisionName == candidate && tr.Percent != nil {
					share += *tr.Percent
				}
			}
			s.mu.Lock()
			st := &s.stats
			st.samples++
			now := time.Now().Format("15:04:05.000")
			if share > 0 {
				if st.stableLow < 0 || sready < st.stableLow {
					st.stableLow = sready
				}
			} else if st.stableLow >= 0 && st.backReady < 0 {
				st.backReady = sready
				st.back = now + ": " + stable + " took its traffic back with " + itoa(int64(sready)) + " Ready pods"
			}
			if share > 0 && share < 100 {
				st.midPeak = max(st.midPeak, sr+cr)
			}
			if sr+cr > st.peak {
				st.peak = sr + cr
				st.peakAt = now + ": " + stable + " " + itoa(int64(sr)) + " + " + candidate + " " + itoa(int64(cr))
			}
			if st.shareOver == "" && share*int64(pods) > int64(cready)*100+int64(pods)/2 {
				st.shareOver = now + ": " + candidate + " served " + itoa(share) + "% on " + itoa(int64(cready)) + " Ready pods"
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *podSampler) end() podStats {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waitReadyPods waits until a Revision's Deployment has n Ready pods.
func waitReadyPods(t *testing.T, rev string, n int32, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, 200*time.Millisecond, fmt.Sprintf("%d Ready pods of %s", n, rev), func() (bool, string) {
		list, err := stk.Kube().AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "serving.knative.dev/revision=" + rev})
		if err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("%d Deployments", len(list.Items))
		}
		return list.Items[0].Status.ReadyReplicas == n, fmt.Sprintf("%d Ready", list.Items[0].Status.ReadyReplicas)
	})
}

// capacityCase is one Service at min-scale 8 rolled out in capacity mode
// (or not), and what its peak of pods may be.
type capacityCase struct {
	name     string
	ann      map[string]string
	maxPeak  int32
	shareCap bool
	crash    bool
}

// Capacity mode on Knative's own autoscaler: a Service at min-scale 8
// rolled out with the availability strategy never runs more than 8 pods
// and its surge of 1, and the candidate never serves more than its Ready
// pods can; the same Service shape rolled out without capacity mode peaks
// at 16. Each Service is its own, so they roll out side by side.
func TestCapacityAvailabilityOnKnative(t *testing.T) {
	t.Parallel()
	for _, tc := range []capacityCase{
		{"cap30", map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability", "sluice.dev/hold": "2s",
			"sluice.dev/capacity-timeout": "90s"}, 9, true, false},
		// resource: never above the stable's 8 but for two moments this
		// stack shows — the candidate's first pod (Knative needs one to
		// call it Ready) and the stable's last pod in reserve, which Knative
		// keeps here because scale-to-zero is off. It takes 100% one pod
		// short, so the share check does not apply.
		{"capres30", map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "resource", "sluice.dev/hold": "2s",
			"sluice.dev/capacity-timeout": "20s"}, 9, false, false},
		{"nocap30", map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/steps": "25,50,100", "sluice.dev/hold": "2s"}, 16, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rolloutAtEight(t, tc)
		})
	}
}

// The availability strategy's bounds hold with the worker killed mid-stage
// (alone: it kills the stack's worker).
func TestCapacityAvailabilityWorkerKilledMidStage(t *testing.T) {
	rolloutAtEight(t, capacityCase{"capkill30", map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability", "sluice.dev/hold": "2s",
		"sluice.dev/capacity-timeout": "90s"}, 9, true, true})
}

// rolloutAtEight runs one capacityCase: a first Revision on 8 Ready pods,
// then a second rolled out while a sampler counts both Revisions' pods.
func rolloutAtEight(t *testing.T, tc capacityCase) {
	t.Helper()
	c := ctl(t)
	minScale := map[string]string{"autoscaling.knative.dev/min-scale": "8"}
	deploy(t, tc.name, "example.com/"+tc.name+":v1", tc.ann, minScale)
	waitOutcome(t, c, svcTarget(tc.name), tc.name+"-00001", 90*time.Second)
	waitClosed(t, c, tc.name)
	waitReadyPods(t, tc.name+"-00001", 8, 90*time.Second)

	sampler := samplePods(t, tc.name, tc.name+"-00001", tc.name+"-00002", 8)
	start := time.Now()
	deploy(t, tc.name, "example.com/"+tc.name+":v2", tc.ann, minScale)
	if tc.crash {
		waitStatus(t, c, svcTarget(tc.name), 90*time.Second, "stage 3", func(s api.Status) bool {
			return s.Candidate == tc.name+"-00002" && s.StepNumber >= 3
		})
		crashWorker(t, 3*time.Second)
	}
	st := waitOutcome(t, c, svcTarget(tc.name), tc.name+"-00002", 4*time.Minute)
	if st.Outcome != api.OutcomeSucceeded {
		sampler.end()
		t.Fatalf("%s: outcome %s: %s", tc.name, st.Outcome, st.Reason)
	}
	waitReadyPods(t, tc.name+"-00002", 8, 60*time.Second)
	ps := sampler.end()
	peak, peakAt, midPeak, samples, over := ps.peak, ps.peakAt, ps.midPeak, ps.samples, ps.shareOver
	t.Logf("%s: peak %d pods (%s), %d while both Revisions had traffic, over %d samples in %s (%d steps)",
		tc.name, peak, peakAt, midPeak, samples, time.Since(start).Round(time.Second), len(st.Steps))
	if tc.name == "capres30" && midPeak > 8 {
		t.Errorf("%s: %d pods while both Revisions had traffic, want at most the stable's 8", tc.name, midPeak)
	}
	if peak > tc.maxPeak {
		t.Errorf("%s: %d pods at the peak (%s), want at most %d", tc.name, peak, peakAt, tc.maxPeak)
	}
	// The admission webhook bounded the candidate as Knative created
	// it; the rollout gave the template's bounds back at the end.
	rev, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), tc.name+"-00002", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, bounded := rev.Annotations["sluice.dev/template-scale"]; bounded != (tc.maxPeak < 16) || (bounded && got != `{"min":"8"}`) {
		t.Errorf("%s: candidate created with template-scale %q (set %v), want it set only in capacity mode", tc.name, got, bounded)
	}
	if got := rev.Annotations["autoscaling.knative.dev/min-scale"]; got != "8" || rev.Annotations["autoscaling.knative.dev/max-scale"] != "" {
		t.Errorf("%s: candidate's bounds at the end: min-scale %q max-scale %q, want its template's 8 and none", tc.name, got, rev.Annotations["autoscaling.knative.dev/max-scale"])
	}
	if tc.shareCap && over != "" {
		t.Errorf("%s: %s", tc.name, over)
	}
	if got := serviceTraffic(t, tc.name); got != tc.name+"-00002=100%" {
		t.Errorf("%s: traffic at the end %s", tc.name, got)
	}
	if tc.maxPeak < 16 && (st.Capacity == nil || st.Capacity.StablePods != 8 || len(st.Capacity.Stages) != 8) {
		t.Errorf("%s: capacity plan %+v, want 8 stages from 8 pods", tc.name, st.Capacity)
	}
}

// stableAtEight deploys a capacity-mode Service at min-scale 8 and waits
// until its first Revision serves everything on 8 Ready pods.
func stableAtEight(t *testing.T, c *control.Client, name string, ann map[string]string) {
	t.Helper()
	deploy(t, name, "example.com/"+name+":v1", ann, map[string]string{"autoscaling.knative.dev/min-scale": "8"})
	waitOutcome(t, c, svcTarget(name), name+"-00001", 90*time.Second)
	waitClosed(t, c, name)
	waitReadyPods(t, name+"-00001", 8, 90*time.Second)
}

// cordon marks every node unschedulable (or schedulable again): pods made
// from then on stay Pending, as in a cluster with no room left.
func cordon(t *testing.T, on bool) {
	t.Helper()
	ctx := context.Background()
	nodes, err := stk.Kube().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on))
	for _, n := range nodes.Items {
		if _, err := stk.Kube().CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("cordon %s (%t): %v", n.Name, on, err)
		}
	}
}

// checkCapacityBack holds the order of a capacity rollback on what the
// sampler saw: the stable had given up pods while the candidate had traffic
// (when released says a stage had released one by then; else the order
// proves less), and had all 8 Ready again when its traffic came back.
func checkCapacityBack(t *testing.T, name string, ps podStats, maxPeak int32, released bool) {
	t.Helper()
	t.Logf("%s: peak %d pods (%s); the stable at %d Ready pods at the fewest while the candidate had traffic; %s; %d samples",
		name, ps.peak, ps.peakAt, ps.stableLow, ps.back, ps.samples)
	if released && (ps.stableLow < 0 || ps.stableLow >= 8) {
		t.Errorf("%s: the stable kept %d Ready pods while the candidate had traffic, want fewer than 8 (a stage releases them)", name, ps.stableLow)
	}
	if ps.backReady != 8 {
		t.Errorf("%s: %s, want its 8 (back: %q)", name, name+"-00001 had "+itoa(int64(ps.backReady))+" Ready pods when its traffic came back", ps.back)
	}
	if ps.peak > maxPeak {
		t.Errorf("%s: %d pods at the peak (%s), want at most %d", name, ps.peak, ps.peakAt, maxPeak)
	}
	if ps.shareOver != "" {
		t.Errorf("%s: %s", name, ps.shareOver)
	}
	rev, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), name+"-00002", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Sluice's admission webhook bounded the candidate as Knative made it
	// (with analysis checks too, whose Prometheus only the worker knows).
	if got := rev.Annotations["sluice.dev/template-scale"]; got != `{"min":"8"}` {
		t.Errorf("%s: the candidate was created with template-scale %q, want it bounded as it was made", name, got)
	}
	if got := rev.Annotations["autoscaling.knative.dev/min-scale"]; got != "8" || rev.Annotations["autoscaling.knative.dev/max-scale"] != "" {
		t.Errorf("%s: the candidate's bounds after the rollback: min-scale %q max-scale %q, want its template's 8 and none",
			name, got, rev.Annotations["autoscaling.knative.dev/max-scale"])
	}
	if got := serviceTraffic(t, name); got != name+"-00001=100%" {
		t.Errorf("%s: traffic after the rollback %s", name, got)
	}
}

// A stage whose pods cannot be placed (every node cordoned: no room in
// the cluster) pauses with the reason, never moving traffic on without its
// pods; an abort then gives the stable its 8 pods back before its traffic,
// and the candidate's template bounds only once Knative has put it in
// reserve, so its min-scale of 8 never runs beside the stable's.
func TestCapacityStageWithoutRoomPausesThenAbortRestoresStableFirst(t *testing.T) {
	c := ctl(t)
	const name = "capstall31"
	stableAtEight(t, c, name, map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability",
		"sluice.dev/hold": "3s", "sluice.dev/capacity-timeout": "10s"})
	sampler := samplePods(t, name, name+"-00001", name+"-00002", 8)
	deploy(t, name, "example.com/"+name+":v2", nil, map[string]string{"autoscaling.knative.dev/min-scale": "8"})
	waitStatus(t, c, svcTarget(name), 90*time.Second, "stage 1's hold", func(s api.Status) bool {
		return s.Candidate == name+"-00002" && s.Phase == api.PhaseHolding && s.StepNumber == 1
	})
	cordon(t, true)
	uncordoned := false
	defer func() {
		if !uncordoned {
			cordon(t, false)
		}
	}()
	st := waitStatus(t, c, svcTarget(name), 60*time.Second, "stage 2 to pause", func(s api.Status) bool { return s.Paused })
	want := "stage 2 of 8: " + name + "-00002 has 1 of the 2 Ready pods it needs after 10s"
	if !strings.Contains(st.PauseReason, want) || st.Weight != 13 {
		sampler.end()
		t.Fatalf("paused at %d%%: %s; want at 13%% with %q", st.Weight, st.PauseReason, want)
	}
	t.Logf("paused: %s", st.PauseReason)
	out, err := sluice(t, "status", name)
	if err != nil || !strings.Contains(out, "Pods:") || !strings.Contains(out, name+"-00002 1 Ready, "+name+"-00001 7 Ready") {
		t.Errorf("sluice status while the stage waits: %v\n%s", err, out)
	}
	t.Logf("sluice status %s:\n%s", name, out)
	cordon(t, false)
	uncordoned = true
	if out, err := sluice(t, "abort", name, "--reason", "no room for stage 2"); err != nil {
		sampler.end()
		t.Fatalf("sluice abort: %v\n%s", err, out)
	}
	st = waitOutcome(t, c, svcTarget(name), name+"-00002", 2*time.Minute)
	if st.Outcome != api.OutcomeAborted || !strings.Contains(st.Reason, "no room for stage 2") {
		sampler.end()
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	// Sampling goes on for a while after the end: a candidate given its
	// template's min-scale too early would be scaled up now.
	time.Sleep(5 * time.Second)
	// The candidate's second pod, bounded for the stage that never moved
	// traffic, may run beside the stable's 8 for a moment.
	checkCapacityBack(t, name, sampler.end(), 10, true)
	waitProgress(t, name+"-00002", "started,step,paused,aborted")
}

// Analysis failing at a stage of a capacity rollout rolls back in the
// capacity order: the stable's bounds and its pods first, then its traffic,
// then the candidate's bounds — on Knative's real autoscaler and real
// queue-proxies, the candidate answering 20% of its requests with errors.
func TestCapacityAnalysisFailureRollsBackInCapacityOrder(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	const name = "capan32"
	stableAtEight(t, c, name, map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability",
		"sluice.dev/hold": "7s", "sluice.dev/capacity-timeout": "60s", "sluice.dev/analysis": knativeChecks})
	sampler := samplePods(t, name, name+"-00001", name+"-00002", 8)
	deploy(t, name, "example.com/"+name+":v2", nil, map[string]string{"autoscaling.knative.dev/min-scale": "8", requestsim.AnnotationErrorRate: "0.2"})
	st := waitOutcome(t, c, svcTarget(name), name+"-00002", 3*time.Minute)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "analysis: success-rate failed") {
		sampler.end()
		t.Fatalf("outcome %s at step %d: %s", st.Outcome, st.StepNumber, st.Reason)
	}
	t.Logf("rolled back at stage %d of %d: %s", st.StepNumber, st.StepCount, st.Reason)
	time.Sleep(5 * time.Second)
	// Rolled back at stage 1 or 2, the candidate runs at most 2 pods
	// beside the stable's 8 for the moment before its traffic returns. The
	// analysis may judge stage 1 before that stage's stable pod is gone (its
	// first round against Knative scaling the stable down): only from stage
	// 2 on must the stable have given one up.
	checkCapacityBack(t, name, sampler.end(), 10, st.StepNumber >= 2)
}

// Someone else's edit of the candidate's scale bounds mid-rollout —
// written through Knative's webhook, as `kubectl annotate` would — is not
// overwritten: the next stage pauses and says what it found; resume writes
// the stage's bounds over it and the rollout ends with the template's.
func TestCapacityScaleDriftPausesThenResumeGoesOn(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	const name = "capdrift33"
	ann := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability", "sluice.dev/capacity-surge": "1", "sluice.dev/hold": "4s"}
	four := map[string]string{"autoscaling.knative.dev/min-scale": "4"}
	deploy(t, name, "example.com/"+name+":v1", ann, four)
	waitOutcome(t, c, svcTarget(name), name+"-00001", 90*time.Second)
	waitClosed(t, c, name)
	waitReadyPods(t, name+"-00001", 4, 60*time.Second)
	deploy(t, name, "example.com/"+name+":v2", nil, four)
	waitStatus(t, c, svcTarget(name), 90*time.Second, "stage 1's hold", func(s api.Status) bool {
		return s.Candidate == name+"-00002" && s.Phase == api.PhaseHolding && s.StepNumber == 1
	})
	patch := []byte(`{"metadata":{"annotations":{"autoscaling.knative.dev/min-scale":"3","autoscaling.knative.dev/max-scale":"3"}}}`)
	if _, err := stk.Serving.ServingV1().Revisions(ns).Patch(context.Background(), name+"-00002", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("edit the candidate's bounds: %v", err)
	}
	st := waitStatus(t, c, svcTarget(name), 30*time.Second, "stage 2 to pause", func(s api.Status) bool { return s.Paused })
	want := `the scale bounds of Revision default/` + name + `-00002 were changed by someone else: min "3" max "3", where sluice last wrote min "1" max "1"`
	if !strings.Contains(st.PauseReason, want) || st.Weight != 25 {
		t.Fatalf("paused at %d%%: %s; want at 25%% with %q", st.Weight, st.PauseReason, want)
	}
	if out, err := sluice(t, "resume", name, "--reason", "my edit was a mistake"); err != nil {
		t.Fatalf("sluice resume: %v\n%s", err, out)
	}
	st = waitOutcome(t, c, svcTarget(name), name+"-00002", 90*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, name) != name+"-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, name))
	}
	waitReadyPods(t, name+"-00002", 4, 60*time.Second)
	rev, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), name+"-00002", metav1.GetOptions{})
	if err != nil || rev.Annotations["autoscaling.knative.dev/min-scale"] != "4" || rev.Annotations["autoscaling.knative.dev/max-scale"] != "" {
		t.Fatalf("the candidate's bounds at the end: %v (%v), want its template's min-scale 4 alone", rev.GetAnnotations(), err)
	}
	waitProgress(t, name+"-00002", "started,step,paused,resumed,step,step,step,succeeded")
}
