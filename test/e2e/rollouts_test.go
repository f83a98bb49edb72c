package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/historycheck"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
	"github.com/sluicehq/sluice/workflows/control"
)

const ns = stack.Namespace

// ctl is the scenario's client of the stack's Temporal server. Every
// scenario uses it, so it also checks, after the scenario, the suite-wide
// invariant that no rollout started during it failed a workflow task.
func ctl(t *testing.T) *control.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: stk.TemporalAddr, Logger: testkit.TemporalLogger()})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		failures, err := historycheck.WorkflowTaskFailures(ctx, c, fmt.Sprintf("StartTime > '%s'", since))
		if err != nil || len(failures) > 0 {
			t.Errorf("workflow task failures in rollouts of this scenario: %v\n%s", err, strings.Join(failures, "\n"))
		}
	})
	return &control.Client{Temporal: c, TaskQueue: api.DefaultTaskQueue, Identity: "e2e@test"}
}

// deploy creates the Service or changes its template, as `kn service update` would.
func deploy(t *testing.T, name, image string, ann, templateAnn map[string]string, traffic ...servingv1.TrafficTarget) {
	t.Helper()
	deployTo(t, stk, name, image, ann, templateAnn, traffic...)
}

// deployTo is deploy on the stack s.
func deployTo(t *testing.T, s *stack.Stack, name, image string, ann, templateAnn map[string]string, traffic ...servingv1.TrafficTarget) {
	t.Helper()
	ctx := context.Background()
	svcs := s.Serving.ServingV1().Services(ns)
	for attempt := 0; attempt < 10; attempt++ {
		svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			svc = &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann}}
			svc.Spec.Template.Annotations = templateAnn
			svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
			svc.Spec.Traffic = traffic
			if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create Service %s: %v", name, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Template.Annotations = templateAnn
		svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
		if _, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); err == nil {
			return
		} else if !apierrors.IsConflict(err) {
			t.Fatalf("update Service %s: %v", name, err)
		}
	}
	t.Fatalf("update Service %s: conflicts", name)
}

// patchTraffic changes a Service's traffic by hand, as an operator would with kubectl.
func patchTraffic(t *testing.T, name string, traffic []servingv1.TrafficTarget) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"traffic": traffic}})
	if _, err := stk.Serving.ServingV1().Services(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func serviceTraffic(t *testing.T, name string) string {
	t.Helper()
	return knative.FormatTraffic(service(t, name).Spec.Traffic)
}

func svcTarget(name string) knative.TargetRef {
	return knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: name}
}

// waitStatus polls the rollout's status until cond holds.
func waitStatus(t *testing.T, c *control.Client, target knative.TargetRef, timeout time.Duration, what string, cond func(api.Status) bool) api.Status {
	t.Helper()
	var last api.Status
	testkit.Eventually(t, timeout, 200*time.Millisecond, what+" on "+target.String(), func() (bool, string) {
		var err error
		last, err = c.Status(context.Background(), target)
		if os.Getenv("SLUICE_E2E_TRACE") != "" {
			t.Logf("%s %s: %s %s weight %d err %v", time.Now().Format("15:04:05.000"), target, last.Candidate, last.Shown, last.Weight, err)
		}
		return err == nil && cond(last), fmt.Sprintf("phase %s candidate %s weight %d reason %q pause %q (err %v)",
			last.Shown, last.Candidate, last.Weight, last.Reason, last.PauseReason, err)
	})
	return last
}

// waitOutcome waits until the rollout of candidate has ended.
func waitOutcome(t *testing.T, c *control.Client, target knative.TargetRef, candidate string, timeout time.Duration) api.Status {
	t.Helper()
	return waitStatus(t, c, target, timeout, "the rollout of "+candidate+" to end", func(s api.Status) bool {
		return s.Candidate == candidate && s.Phase.Done()
	})
}

// progress lists the progress event types received for a candidate, in
// sequence order. A retried send repeats an event with the same id: a
// consumer counts it once.
func progress(candidate string) []string {
	type ev struct {
		seq int
		typ string
	}
	var evs []ev
	ids := map[string]bool{}
	for _, e := range sink.Events() {
		if e.Subject() != candidate || ids[e.ID()] {
			continue
		}
		ids[e.ID()] = true
		var n int
		fmt.Sscan(fmt.Sprint(e.Extensions()["sequence"]), &n)
		evs = append(evs, ev{n, strings.TrimPrefix(e.Type(), "dev.sluice.rollout.")})
	}
	for i := range evs {
		for j := i + 1; j < len(evs); j++ {
			if evs[j].seq < evs[i].seq {
				evs[i], evs[j] = evs[j], evs[i]
			}
		}
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.typ
	}
	return out
}

// waitProgress waits for the progress events of a candidate to read want.
func waitProgress(t *testing.T, candidate, want string) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, 200*time.Millisecond, "progress events of "+candidate+" to read "+want, func() (bool, string) {
		got := strings.Join(progress(candidate), ",")
		return got == want, got
	})
}

// firstRollout deploys a new opted-in Service and waits until its first
// Revision has all the traffic, pinned by name.
func firstRollout(t *testing.T, c *control.Client, name string, ann map[string]string) {
	t.Helper()
	firstRolloutOf(t, c, name, ann, nil)
}

// firstRolloutOf is firstRollout with template annotations for the first
// Revision, e.g. how the simulator makes it answer.
func firstRolloutOf(t *testing.T, c *control.Client, name string, ann, templateAnn map[string]string) {
	t.Helper()
	all := map[string]string{"sluice.dev/rollout": "enabled"}
	for k, v := range ann {
		all[k] = v
	}
	deploy(t, name, "example.com/"+name+":v1", all, templateAnn)
	waitOutcome(t, c, svcTarget(name), name+"-00001", 60*time.Second)
	waitClosed(t, c, name)
	if got := serviceTraffic(t, name); got != name+"-00001=100%" {
		t.Fatalf("after the first rollout: traffic %s", got)
	}
}

// waitClosed waits for the workflow of a Service's rollout to close, so the
// next Revision starts a rollout of its own rather than joining this one as
// it ends.
func waitClosed(t *testing.T, c *control.Client, name string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, 100*time.Millisecond, "the rollout of "+name+" to close", func() (bool, string) {
		d, err := c.Temporal.DescribeWorkflowExecution(context.Background(), api.RolloutID(svcTarget(name)), "")
		if err != nil {
			return false, err.Error()
		}
		return d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.WorkflowExecutionInfo.Status.String()
	})
}
