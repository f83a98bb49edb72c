package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

// Two clusters share one Temporal namespace, each with its own worker and
// task queue, and each with a Service named hello: their rollouts run at
// once as workflows of their own, and each writes its own cluster only. A
// rollout started on one cluster's task queue for the other cluster's target
// fails before it writes anything.
func TestClustersShareOneTemporal(t *testing.T) {
	opts := temporalServer(t)
	policy := map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1s"}
	east := startWorker(t, opts, "east", nil, helloService(policy)...)
	west := startWorker(t, opts, "west", nil, helloService(policy)...)
	if _, err := east.ctl.Setup(context.Background(), opts.Namespace); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runs := map[string]string{}
	for name, s := range map[string]*stack{"east": east, "west": west} {
		run, err := s.ctl.Start(ctx, hello, "hello-00002", "")
		if err != nil {
			t.Fatalf("%s: start: %v", name, err)
		}
		runs[name] = run
	}
	for name, s := range map[string]*stack{"east": east, "west": west} {
		res, err := s.ctl.Wait(ctx, hello)
		if err != nil || res.Outcome != api.OutcomeSucceeded {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		if got := knative.FormatTraffic(s.liveTraffic()); !strings.Contains(got, "hello-00002=100%") {
			t.Fatalf("%s: traffic %s", name, got)
		}
		st := s.status()
		if st.Target.Cluster != name || !strings.HasPrefix(api.RolloutID(st.Target), "rollout/"+name+"/") {
			t.Fatalf("%s: target %+v, workflow %s", name, st.Target, api.RolloutID(st.Target))
		}
		// Each cluster's workflow is its own: two runs, two histories.
		d, err := s.temporal.DescribeWorkflowExecution(ctx, "rollout/"+name+"/default/service/hello", "")
		if err != nil || d.WorkflowExecutionInfo.Execution.RunId != runs[name] {
			t.Fatalf("%s: describe: %v", name, err)
		}
	}
	// The history of each lists one rollout, of its own cluster.
	for name, s := range map[string]*stack{"east": east, "west": west} {
		past, err := s.ctl.History(ctx, hello, 10)
		if err != nil || len(past) != 1 || past[0].Target != name+":default/service/hello" {
			t.Fatalf("%s: history %+v, %v", name, past, err)
		}
	}

	// west's target, started on east's task queue: east's worker refuses it.
	misrouted := &control.Client{Temporal: east.temporal, TaskQueue: east.ctl.TaskQueue, Cluster: "west", Identity: "it@test"}
	before := knative.FormatTraffic(east.liveTraffic())
	if _, err := misrouted.Start(ctx, hello, "hello-00001", "wrong queue"); err != nil {
		t.Fatal(err)
	}
	res, err := misrouted.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, `names cluster "west", but this worker serves cluster "east"`) {
		t.Fatalf("misrouted rollout: %+v, %v", res, err)
	}
	if after := knative.FormatTraffic(east.liveTraffic()); after != before {
		t.Fatalf("east's traffic changed from %s to %s", before, after)
	}
}
