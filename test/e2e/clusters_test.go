package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/workflows/control"
)

// startCluster starts another cluster beside stk, on stk's Temporal: its
// own API server (audited, with audit), Knative control plane, kwok,
// Prometheus and sluice worker and receiver, named name. Its receiver finds
// new Revisions by its sweep: the one ApiServerSource adapter a machine
// can run serves stk. It stops when the test ends.
func startCluster(ctx context.Context, t *testing.T, name string, audit bool) *stack.Stack {
	t.Helper()
	return startClusterOpts(ctx, t, name, audit, stackOptions.Tools.Sluice)
}

// startClusterWith is startCluster, its sluice the binary bin.
func startClusterWith(ctx context.Context, t *testing.T, name, bin string) *stack.Stack {
	t.Helper()
	return startClusterOpts(ctx, t, name, false, bin)
}

func startClusterOpts(ctx context.Context, t *testing.T, name string, audit bool, bin string) *stack.Stack {
	t.Helper()
	o := stackOptions
	o.Tools.Sluice = bin
	o.Dir, o.Temporal, o.Cluster, o.Audit = t.TempDir(), stk.TemporalAddr, name, audit
	o.Adapter, o.UI, o.ProgressSink, o.DeployDir = false, false, "", ""
	o.ReceiverEnv = []string{"SLUICE_RECEIVER_SWEEP=2s"}
	s, err := stack.Start(ctx, o)
	if err != nil {
		t.Fatalf("start cluster %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster %s:\n%s", name, s.Logs())
		}
		s.Stop()
	})
	return s
}

// clusterCtl steers the rollouts of cluster name.
func clusterCtl(c *control.Client, name string) *control.Client {
	return &control.Client{Temporal: c.Temporal, TaskQueue: "sluice-rollouts-" + name, Cluster: name, Identity: "e2e"}
}

// A second cluster — its own API server, Knative control plane, kwok and
// sluice worker and receiver, named west — shares this stack's Temporal.
// A Service named twin in each cluster is rolled out in both at once: two
// workflows, each cluster's traffic written by its own worker only. west's
// receiver finds its Revisions by its sweep (the one ApiServerSource
// adapter a machine can run serves the first stack).
func TestClustersShareTemporalOnKnative(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	west := startCluster(ctx, t, "west", false)
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
