package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/requestsim"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/workflows/control"
)

// A second cluster — its own API server, Knative control plane, kwok and
// sluice worker and receiver, named west — shares this stack's Temporal.
// A Service named twin in each cluster is rolled out in both at once: two
// workflows, each cluster's traffic written by its own worker only. west's
// receiver finds its Revisions by its sweep (it has no ApiServerSource
// adapter).
func TestClustersShareTemporalOnKnative(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	west := cluster(ctx, t, "west")
	c := ctl(t)
	westCtl := clusterCtl(c, "west")
	policy := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/steps": "50,100", "sluice.dev/hold": "2s"}
	deployTo(t, stk, "twin", "example.com/twin:v1", policy, nil)
	deployTo(t, west, "twin", "example.com/twin:v1", policy, nil)
	waitOutcome(t, c, svcTarget("twin"), "twin-00001", time.Minute)
	waitOutcome(t, westCtl, svcTarget("twin"), "twin-00001", time.Minute)
	// Both first rollouts closed, so the next Revisions start rollouts of
	// their own.
	for _, id := range []string{"rollout/default/service/twin", "rollout/west/default/service/twin"} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			d, err := c.Temporal.DescribeWorkflowExecution(ctx, id, "")
			if err == nil && d.WorkflowExecutionInfo.CloseTime != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not close: %v", id, err)
			}
		}
	}

	deployTo(t, stk, "twin", "example.com/twin:v2", nil, nil)
	deployTo(t, west, "twin", "example.com/twin:v2", nil, nil)
	for name, cc := range map[string]*control.Client{"": c, "west": westCtl} {
		st := waitOutcome(t, cc, svcTarget("twin"), "twin-00002", 2*time.Minute)
		if st.Outcome != api.OutcomeSucceeded || st.Target.Cluster != name || len(st.Steps) != 2 || st.Steps[0].StartedAt.IsZero() {
			t.Fatalf("cluster %q: %s (%s), target %+v", name, st.Outcome, st.Reason, st.Target)
		}
	}
	for name, s := range map[string]*stack.Stack{"first": stk, "west": west} {
		svc, err := s.Serving.ServingV1().Services(ns).Get(ctx, "twin", metav1.GetOptions{})
		if err != nil || knative.FormatTraffic(svc.Spec.Traffic) != "twin-00002=100%" {
			t.Fatalf("%s's twin: %v, traffic %v", name, err, svc.Spec.Traffic)
		}
	}
	// The CLI reaches west's rollout by its cluster.
	out, err := sluiceEnv(t, []string{"SLUICE_CLUSTER=west"}, "status", "twin")
	if err != nil || !strings.Contains(out, "west:default/service/twin") || !strings.Contains(out, "rollout/west/default/service/twin") || !strings.Contains(out, "Succeeded") {
		t.Fatalf("sluice status twin (west): %v\n%s", err, out)
	}
}

// Two more clusters, east then west, on stk's Temporal, with a wave plan
// and an analysis check on their real queue-proxies and Prometheus. A good
// Revision goes wave by wave — west's API server gets no write giving it a
// share until east's has taken the write of 100% and the 6 s soak has
// passed — while west's worker is killed as it waits for release, and
// both workers (the waves' queue has no other) as the wave soaks. Then a
// Revision failing east's analysis never gets traffic in west.
func TestWavesOnTwoKnativeClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	east, west := cluster(ctx, t, "east"), cluster(ctx, t, "west")
	// The last scenario on other clusters: the parallel ones that follow
	// need none, and the machine's cores are better spent on them.
	t.Cleanup(stopClusters)
	c := ctl(t)
	eastCtl, westCtl := clusterCtl(c, "east"), clusterCtl(c, "west")
	policy := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/steps": "50,100", "sluice.dev/hold": "4s",
		"sluice.dev/waves":    "waves:\n- {clusters: [east], soak: 6s}\n- {clusters: [west]}\n",
		"sluice.dev/analysis": "interval: 2s\nwindow: 5s\nchecks:\n  - {name: success-rate, builtin: success-rate, inconclusiveLimit: 3}\n"}
	deployTo(t, east, "wv", "example.com/wv:v1", policy, nil)
	deployTo(t, west, "wv", "example.com/wv:v1", policy, nil)
	waitOutcome(t, eastCtl, svcTarget("wv"), "wv-00001", time.Minute)
	waitOutcome(t, westCtl, svcTarget("wv"), "wv-00001", time.Minute)
	time.Sleep(2 * time.Second) // both first rollouts close

	// GitOps lands v2 in west first.
	deployTo(t, west, "wv", "example.com/wv:v2", nil, nil)
	waitStatus(t, westCtl, svcTarget("wv"), time.Minute, "west waiting for its wave", func(s api.Status) bool {
		return s.Candidate == "wv-00002" && s.Phase == api.PhaseWaitingWave
	})
	west.KillWorker()
	if err := west.StartWorker(ctx); err != nil {
		t.Fatal(err)
	}
	deployTo(t, east, "wv", "example.com/wv:v2", nil, nil)
	waitStatus(t, eastCtl, svcTarget("wv"), 2*time.Minute, "east at 100%, the wave soaking", func(s api.Status) bool {
		return s.Candidate == "wv-00002" && s.Phase == api.PhaseWaveHold
	})
	// Every worker that polls the waves' queue dies mid-soak: the wave's
	// soak is a durable timer, and whichever comes back carries it on.
	east.KillWorker()
	west.KillWorker()
	time.Sleep(2 * time.Second)
	for _, s := range []*stack.Stack{east, west} {
		if err := s.StartWorker(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, cl := range map[string]*control.Client{"east": eastCtl, "west": westCtl} {
		st := waitOutcome(t, cl, svcTarget("wv"), "wv-00002", 3*time.Minute)
		if st.Outcome != api.OutcomeSucceeded || !strings.Contains(st.Reason, "is at 100% in every cluster: east, west") {
			t.Fatalf("%s: %s: %s", name, st.Outcome, st.Reason)
		}
	}
	eastWrites, westWrites := shares(t, east.AuditLog, "wv", "wv-00002", time.Time{}), shares(t, west.AuditLog, "wv", "wv-00002", time.Time{})
	if len(eastWrites) == 0 || len(westWrites) == 0 || eastWrites[len(eastWrites)-1].Percent != 100 {
		t.Fatalf("writes of wv-00002: east %+v, west %+v", eastWrites, westWrites)
	}
	eastFull, westFirst := eastWrites[len(eastWrites)-1].At, westWrites[0].At
	if westFirst.Before(eastFull.Add(6 * time.Second)) {
		t.Fatalf("west's first share of wv-00002 at %s, before east's 100%% (%s) and the 6s soak", westFirst, eastFull)
	}
	t.Logf("from the audit logs: east gave wv-00002 its first share at %s and 100%% at %s; west its first share at %s (%.1fs after east's 100%%; soak 6s)",
		eastWrites[0].At.Format(time.StampMilli), eastFull.Format(time.StampMilli), westFirst.Format(time.StampMilli), westFirst.Sub(eastFull).Seconds())
	out, err := sluiceEnv(t, nil, "wave", "status", "wv")
	if err != nil || !strings.Contains(out, "Succeeded") {
		t.Fatalf("sluice wave status wv: %v\n%s", err, out)
	}
	t.Logf("sluice wave status wv:\n%s", out)

	// v3 answers half its requests with 500: east's analysis rolls it back,
	// and west, joined and waiting, is stopped where it began.
	bad := map[string]string{requestsim.AnnotationErrorRate: "0.5"}
	deployTo(t, west, "wv", "example.com/wv:v3", nil, bad)
	deployTo(t, east, "wv", "example.com/wv:v3", nil, bad)
	st := waitOutcome(t, eastCtl, svcTarget("wv"), "wv-00003", 2*time.Minute)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "analysis: success-rate failed") {
		t.Fatalf("east: %s: %s", st.Outcome, st.Reason)
	}
	st = waitOutcome(t, westCtl, svcTarget("wv"), "wv-00003", 2*time.Minute)
	// West joined before east failed ("not released: …") or after the wave
	// had ended ("the wave of release … has ended Failed: …"): stopped either way.
	if st.Outcome != api.OutcomeAborted || !strings.HasPrefix(st.Reason, "wave plan: ") ||
		!strings.Contains(st.Reason, "wave 1 failed in cluster east: wv-00003 RolledBack: analysis: success-rate failed") {
		t.Fatalf("west: %s: %s", st.Outcome, st.Reason)
	}
	if w := shares(t, west.AuditLog, "wv", "wv-00003", time.Time{}); len(w) != 0 {
		t.Fatalf("west gave wv-00003 a share: %+v", w)
	}
}
