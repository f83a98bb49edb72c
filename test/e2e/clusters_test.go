package e2e

import (
	"context"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/workflows/control"
)

// clusters are the other clusters beside stk, on stk's Temporal, each
// started by the first scenario that needs it and kept until the suite
// ends: starting one costs as much as a scenario.
var clusters struct {
	sync.Mutex
	byName map[string]*stack.Stack
}

// cluster returns the cluster named name beside stk, starting it if no
// scenario has: its own API server (audited), Knative control plane, kwok,
// Prometheus and sluice worker and receiver, running this build. Its
// receiver finds new Revisions by its sweep alone (every 2 s): it has no
// ApiServerSource adapter, so the scenarios also prove the sweep carries a
// cluster's rollouts. A scenario that replaces its sluice puts this build
// back before it ends.
func cluster(ctx context.Context, t *testing.T, name string) *stack.Stack {
	t.Helper()
	clusters.Lock()
	defer clusters.Unlock()
	s := clusters.byName[name]
	if s == nil {
		dir, err := os.MkdirTemp(stackOptions.Dir, "cluster-"+name+"-")
		if err != nil {
			t.Fatal(err)
		}
		o := stackOptions
		o.Dir, o.Temporal, o.Cluster, o.Audit = dir, stk.TemporalAddr, name, true
		o.Adapter, o.UI, o.ProgressSink, o.DeployDir = false, false, "", ""
		o.ReceiverEnv = []string{"SLUICE_RECEIVER_SWEEP=2s"}
		if name == controllerCluster {
			// sluice as one process; every request on Knative's kinds
			// audited, to show which watches it opened.
			o.Controller, o.AuditTrafficOnly = true, false
		}
		if s, err = stack.Start(ctx, o); err != nil {
			t.Fatalf("start cluster %s: %v", name, err)
		}
		if clusters.byName == nil {
			clusters.byName = map[string]*stack.Stack{}
		}
		clusters.byName[name] = s
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster %s:\n%s", name, s.Logs())
		}
	})
	return s
}

// stopClusters stops every cluster a scenario started; one that needs a
// cluster after this starts it again.
func stopClusters() {
	clusters.Lock()
	defer clusters.Unlock()
	for _, name := range slices.Sorted(maps.Keys(clusters.byName)) {
		clusters.byName[name].Stop()
		delete(clusters.byName, name)
	}
}

// clusterCtl steers the rollouts of cluster name.
func clusterCtl(c *control.Client, name string) *control.Client {
	return &control.Client{Temporal: c.Temporal, TaskQueue: "sluice-rollouts-" + name, Cluster: name, Identity: "e2e"}
}
