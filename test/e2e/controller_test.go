package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/testkit"
)

// controllerCluster is the cluster whose sluice runs as `sluice controller`.
const controllerCluster = "north"

// A cluster whose sluice is one `sluice controller` process: its receiver's
// sweep starts the rollout of a new Revision, its worker steps the traffic
// on Knative's own controller, and killed as the rollout holds at 50%, the
// process comes back and finishes it. Its waits on the Service's traffic
// follow the receiver's informers: the API server's audit log shows
// sluice's watches of Services namespace-wide (the informers) and none of
// one Service by name.
func TestControllerRunsRolloutsInOneProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	north := cluster(ctx, t, controllerCluster)
	northCtl := clusterCtl(ctl(t), controllerCluster)
	policy := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/steps": "50,100", "sluice.dev/hold": "6s"}
	deployTo(t, north, "solo", "example.com/solo:v1", policy, nil)
	waitOutcome(t, northCtl, svcTarget("solo"), "solo-00001", time.Minute)
	id := "rollout/" + controllerCluster + "/default/service/solo"
	testkit.Eventually(t, 30*time.Second, 100*time.Millisecond, "the rollout of solo-00001 to close", func() (bool, string) {
		d, err := northCtl.Temporal.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return false, err.Error()
		}
		return d.WorkflowExecutionInfo.CloseTime != nil, d.WorkflowExecutionInfo.Status.String()
	})

	deployTo(t, north, "solo", "example.com/solo:v2", nil, nil)
	waitStatus(t, northCtl, svcTarget("solo"), 2*time.Minute, "solo-00002 holding at 50%", func(s api.Status) bool {
		return s.Candidate == "solo-00002" && s.Phase == api.PhaseHolding
	})
	north.KillWorker() // the controller: the worker and the receiver
	time.Sleep(time.Second)
	if err := north.StartWorker(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitOutcome(t, northCtl, svcTarget("solo"), "solo-00002", 2*time.Minute)
	if st.Outcome != api.OutcomeSucceeded {
		t.Fatalf("solo-00002: %s: %s", st.Outcome, st.Reason)
	}
	writes := shares(t, north.AuditLog, "solo", "solo-00002", time.Time{})
	if len(writes) < 2 || writes[0].Percent != 50 || writes[len(writes)-1].Percent != 100 {
		t.Fatalf("writes giving solo-00002 a share: %+v; want 50%% first and 100%% last", writes)
	}

	var informers, byName []string
	err := testkit.ScanAudit(north.AuditLog, func(e *auditv1.Event) error {
		if e.Verb != "watch" || !strings.HasPrefix(e.UserAgent, "sluice/") || e.ObjectRef == nil ||
			(e.ObjectRef.Resource != "services" && e.ObjectRef.Resource != "routes") {
			return nil
		}
		if e.ObjectRef.Name == "" {
			informers = append(informers, e.RequestURI)
		} else {
			byName = append(byName, e.RequestURI)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(informers) == 0 {
		t.Fatal("the audit log has no watch of Services or Routes by sluice at all: it cannot show which it opened")
	}
	if len(byName) > 0 {
		t.Errorf("the controller watched single Services or Routes on the API server instead of following its informers: %v", byName)
	}
	t.Logf("sluice's watches of Services and Routes: %d namespace-wide, %d of one object", len(informers), len(byName))
}
