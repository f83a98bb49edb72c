package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// Scenarios only Knative's own control plane can give: the imitation it
// replaced could not fail like this.

// Knative's webhook is down for a while mid-step: the next step's
// write fails ("failed calling webhook"), is retried, and the rollout's
// status says why; once the webhook is back the rollout finishes.
func TestKnativeWebhookDownMidStepIsRetried(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "s22", map[string]string{"sluice.dev/steps": "30,60,100", "sluice.dev/hold": "4s"})
	deploy(t, "s22", "example.com/s22:v2", nil, nil)
	waitStatus(t, c, svcTarget("s22"), 60*time.Second, "the first hold", func(s api.Status) bool {
		return s.Candidate == "s22-00002" && s.Phase == api.PhaseHolding && s.Weight == 30
	})
	stk.KillKnativeWebhook()
	restarted := false
	defer func() {
		if !restarted {
			_ = stk.RestartKnativeWebhook(context.Background())
		}
	}()
	st := waitStatus(t, c, svcTarget("s22"), 60*time.Second, "the refused write to be retried", func(s api.Status) bool {
		for _, p := range s.Pending {
			if p.Attempt > 1 && strings.Contains(p.LastError, "failed calling webhook") {
				return true
			}
		}
		return false
	})
	if st.Outcome != "" || st.Paused {
		t.Fatalf("while Knative's webhook is down: outcome %q paused %v (%s)", st.Outcome, st.Paused, st.PauseReason)
	}
	if out, err := sluice(t, "status", "s22"); err != nil || !strings.Contains(out, "failed calling webhook") {
		t.Fatalf("sluice status does not say why the step waits: %v\n%s", err, out)
	}
	if got := serviceTraffic(t, "s22"); got != "s22-00001=70%, s22-00002=30%" {
		t.Fatalf("traffic while the webhook is down: %s", got)
	}
	if err := stk.RestartKnativeWebhook(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	st = waitOutcome(t, c, svcTarget("s22"), "s22-00002", 90*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s22") != "s22-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "s22"))
	}
}

// Knative defaults a Service created with no traffic, and its
// autoscaler scales Revisions for real: min-scale 3 gives three pods,
// scheduled on kwok's node and Ready.
func TestKnativeDefaultsTrafficAndScalesRevisions(t *testing.T) {
	t.Parallel()
	deploy(t, "s23", "example.com/s23:v1", nil, map[string]string{"autoscaling.knative.dev/min-scale": "3"})
	if got := serviceTraffic(t, "s23"); got != "latest=100%" {
		t.Fatalf("Knative's defaulting of a Service with no traffic: %s", got)
	}
	waitRevisionReady(t, "s23-00001")
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rev, err := stk.Serving.ServingV1().Revisions(ns).Get(ctx, "s23-00001", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := stk.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/revision=s23-00001"})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Spec.NodeName != "" {
					ready++
				}
			}
		}
		if rev.Status.ActualReplicas != nil && *rev.Status.ActualReplicas == 3 && ready == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("min-scale 3: the Revision reports %v replicas, %d of %d pods Ready", rev.Status.ActualReplicas, ready, len(pods.Items))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// The unit tests' fake (test/knativefake) must not disagree with
// Knative: the same traffic lists, written to a real Service with two Ready
// Revisions, show in its status as the fake computes them.
func TestKnativefakeAgreesWithKnative(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	deploy(t, "s24", "example.com/s24:v1", nil, nil)
	waitRevisionReady(t, "s24-00001")
	deploy(t, "s24", "example.com/s24:v2", nil, nil)
	waitRevisionReady(t, "s24-00002")
	T := knativefake.Target
	lists := [][]servingv1.TrafficTarget{
		{T("s24-00001", 100, "")},
		{T("s24-00001", 50, ""), T("s24-00002", 50, "")},
		{T("@latest", 100, "")},
		{T("s24-00001", 80, "stable"), T("@latest", 20, "latest")},
		{T("s24-00001", 100, ""), T("@latest", 0, "latest")},
		{T("s24-00001", 0, "old"), T("s24-00002", 100, "")},
		{T("s24-00001", 30, ""), T("s24-00001", 30, "again"), T("s24-00002", 40, "")},
	}
	for _, list := range lists {
		want := knative.FormatTraffic(list)
		patchTraffic(t, "s24", list)
		fake := knativefake.New(knativefake.Service(ns, "s24", nil, list...),
			knativefake.Revision(ns, "s24", 1, true), knativefake.Revision(ns, "s24", 2, true))
		fs, err := fake.ServingV1().Services(ns).Get(ctx, "s24", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Knative's status can show the previous traffic at the new
		// observedGeneration, Ready, for a moment (seen once, while its
		// writes of the Route met conflicts): the fake must agree with what
		// Knative settles on.
		faked := knative.FormatTraffic(fs.Status.Traffic)
		deadline := time.Now().Add(20 * time.Second)
		for {
			svc, err := stk.Serving.ServingV1().Services(ns).Get(ctx, "s24", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			real := knative.FormatTraffic(svc.Status.Traffic)
			settled := svc.Status.ObservedGeneration == svc.Generation && svc.IsReady()
			if settled && real == faked {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("spec %s: after 20s Knative shows %s (observed generation %d of %d, Ready %v), knativefake %s",
					want, real, svc.Status.ObservedGeneration, svc.Generation, svc.IsReady(), faked)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
