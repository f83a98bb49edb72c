package servingstandin_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/servingstandin"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
)

// TestStandInFollowsTheSpec runs the stand-in against a real API server with
// Knative's CRDs: a Service gets its Configuration and first Revision,
// Ready; a template change with a split gets the second Revision, and the
// Service's status shows the split at the Service's generation, with
// Knative's own readiness.
func TestStandInFollowsTheSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tools, root, crds := stack.ForTest(ctx, t)
	stk, err := stack.Start(ctx, stack.Options{Dir: t.TempDir(), Tools: tools, Root: root, CRDDirs: crds, ControlPlaneOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Stop()
	ready := map[string]bool{}
	readyCh := make(chan string, 4)
	c := &servingstandin.Controller{Client: stk.Serving, Namespace: stack.Namespace, OnReady: func(rev string, _ time.Time) { readyCh <- rev }}
	runCtx, stop := context.WithCancel(ctx)
	done, err := c.Run(runCtx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); <-done }()

	svcs := stk.Serving.ServingV1().Services(stack.Namespace)
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: stack.Namespace}}
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/hello:v1"}}
	svc.Spec.Traffic = []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}}
	if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc := knative.Client{Serving: stk.Serving}
	ref := knative.ObjectRef{Namespace: stack.Namespace, Kind: knative.KindService, Name: "hello"}
	shows := func(want []servingv1.TrafficTarget) func() (bool, string) {
		return func() (bool, string) {
			live, err := kc.ReadTraffic(ctx, ref)
			if err != nil {
				return false, err.Error()
			}
			for {
				select {
				case rev := <-readyCh:
					ready[rev] = true
					continue
				default:
				}
				break
			}
			// sluice's own verdict on a write: the status at the spec's
			// generation, Ready, showing the traffic.
			lacks := live.Lacks(ref, want, live.Generation)
			return lacks == "", lacks
		}
	}
	testkit.Eventually(t, 30*time.Second, 100*time.Millisecond, "the first Revision takes the traffic",
		shows([]servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: new(int64(100))}}))
	if out, err := stk.Kubectl(ctx, "get", "configurations.serving.knative.dev", "hello", "-n", stack.Namespace, "-o", "name"); err != nil {
		t.Fatalf("the Service's Configuration: %v: %s", err, out)
	}

	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{
		"template": map[string]any{"spec": map[string]any{"containers": []map[string]string{{"image": "example.com/hello:v2"}}}},
		"traffic":  []map[string]any{{"revisionName": "hello-00001", "percent": 70}, {"revisionName": "hello-00002", "percent": 30}},
	}})
	if _, err := svcs.Patch(ctx, "hello", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, 100*time.Millisecond, "the split shows in the Service's status",
		shows([]servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: new(int64(70))}, {RevisionName: "hello-00002", Percent: new(int64(30))}}))
	if !ready["hello-00001"] || !ready["hello-00002"] {
		t.Errorf("OnReady told of %v, want both Revisions", ready)
	}
	rev, err := stk.Serving.ServingV1().Revisions(stack.Namespace).Get(ctx, "hello-00002", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := knative.ReadRevisionLabels(rev.Labels); l.Service != "hello" || l.Configuration != "hello" || l.Generation != 2 {
		t.Errorf("hello-00002's labels say %+v, want Service and Configuration hello at generation 2", l)
	}
}
