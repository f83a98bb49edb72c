package simulator

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"knative.dev/serving/pkg/client/clientset/versioned/fake"
)

func pct(n int64) *int64 { return &n }
func yes() *bool         { b := true; return &b }

func rev(name, config string, gen string, ready corev1.ConditionStatus) servingv1.Revision {
	r := servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"serving.knative.dev/configuration": config, "serving.knative.dev/configurationGeneration": gen}}}
	r.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: ready}}
	return r
}

func TestRouteStatusRules(t *testing.T) {
	revs := []servingv1.Revision{rev("a-00001", "a", "1", corev1.ConditionTrue), rev("a-00002", "a", "2", corev1.ConditionUnknown)}
	cfgs := []servingv1.Configuration{{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: servingv1.ConfigurationStatus{
		ConfigurationStatusFields: servingv1.ConfigurationStatusFields{LatestReadyRevisionName: "a-00001"}}}}
	prev := []servingv1.TrafficTarget{{RevisionName: "a-00001", Percent: pct(100)}}
	route := func(traffic ...servingv1.TrafficTarget) *servingv1.Route {
		r := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 4}, Spec: servingv1.RouteSpec{Traffic: traffic}}
		r.Status.Traffic = prev
		return r
	}
	tests := []struct {
		name     string
		route    *servingv1.Route
		assigned corev1.ConditionStatus
		traffic  string // revision=percent of status.traffic
	}{
		{"latest resolves to the newest Ready Revision", route(servingv1.TrafficTarget{ConfigurationName: "a", LatestRevision: yes(), Percent: pct(100)}), corev1.ConditionTrue, "a-00001=100"},
		{"a not-Ready target freezes the Route", route(servingv1.TrafficTarget{RevisionName: "a-00001", Percent: pct(50)}, servingv1.TrafficTarget{RevisionName: "a-00002", Percent: pct(50)}), corev1.ConditionFalse, "a-00001=100"},
		{"a 0% not-Ready tag freezes it too", route(servingv1.TrafficTarget{RevisionName: "a-00001", Percent: pct(100)}, servingv1.TrafficTarget{RevisionName: "a-00002", Tag: "next"}), corev1.ConditionFalse, "a-00001=100"},
		{"a missing Revision", route(servingv1.TrafficTarget{RevisionName: "a-00009", Percent: pct(100)}), corev1.ConditionFalse, "a-00001=100"},
		{"percents must sum to 100", route(servingv1.TrafficTarget{RevisionName: "a-00001", Percent: pct(90)}), corev1.ConditionFalse, "a-00001=100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := routeStatus(tt.route, newRouteIndex(cfgs, revs))
			if st.ObservedGeneration != 4 {
				t.Errorf("observedGeneration %d", st.ObservedGeneration)
			}
			if c := st.GetCondition(servingv1.RouteConditionAllTrafficAssigned); c == nil || c.Status != tt.assigned {
				t.Fatalf("AllTrafficAssigned = %v, want %s", c, tt.assigned)
			}
			got := ""
			for _, tr := range st.Traffic {
				got += tr.RevisionName + "=" + itoa(*tr.Percent)
			}
			if got != tt.traffic {
				t.Fatalf("status.traffic = %s, want %s", got, tt.traffic)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func cond(conds duckv1.Conditions, typ apis.ConditionType) corev1.ConditionStatus {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func TestRevisionConditions(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created), Annotations: map[string]string{}}}
	ready := func(at time.Duration) corev1.ConditionStatus {
		return cond(revisionConditions(r, 2*time.Second, created.Add(at)), apis.ConditionReady)
	}
	if ready(time.Second) != corev1.ConditionUnknown || ready(3*time.Second) != corev1.ConditionTrue {
		t.Fatal("a Revision is Ready after the default delay, not before")
	}
	r.Annotations[AnnotationReadyAfter] = "10s"
	if ready(3*time.Second) != corev1.ConditionUnknown || ready(11*time.Second) != corev1.ConditionTrue {
		t.Fatal("ready-after overrides the delay")
	}
	r.Annotations[AnnotationFail] = "true"
	conds := revisionConditions(r, 0, created.Add(time.Minute))
	if cond(conds, apis.ConditionReady) != corev1.ConditionFalse || cond(conds, servingv1.RevisionConditionContainerHealthy) != corev1.ConditionFalse {
		t.Fatalf("a failing Revision: %+v", conds)
	}
	delete(r.Annotations, AnnotationFail)
	r.Annotations[AnnotationNeverReady] = "true"
	if ready(time.Hour) != corev1.ConditionUnknown {
		t.Fatal("never-ready stays not Ready")
	}
}

// newFake is the generated fake clientset with generation bookkeeping, which
// the fake leaves out and the API server does: 1 on create, +1 on a spec change.
func newFake(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewSimpleClientset(objs...)
	c.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && o.GetGeneration() == 0 {
			o.SetGeneration(1)
			o.SetCreationTimestamp(metav1.NewTime(time.Now()))
		}
		return false, nil, nil
	})
	c.PrependReactor("update", "configurations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "" {
			return false, nil, nil
		}
		cfg := a.(k8stesting.UpdateAction).GetObject().(*servingv1.Configuration)
		old, err := c.Tracker().Get(a.GetResource(), cfg.Namespace, cfg.Name)
		if err == nil && !equalJSON(old.(*servingv1.Configuration).Spec, cfg.Spec) {
			cfg.Generation = old.(*servingv1.Configuration).Generation + 1
		}
		return false, nil, nil
	})
	return c
}

func TestServiceLifecycle(t *testing.T) {
	ctx := context.Background()
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default", Generation: 1}}
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "example.com/hello:v1"}}
	c := newFake(svc)
	s := &Simulator{Serving: c, Namespace: "default", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i := 0; i < 3; i++ {
		if err := s.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := c.ServingV1().Services("default").Get(ctx, "hello", metav1.GetOptions{})
	if got.Status.LatestReadyRevisionName != "hello-00001" || !got.Status.GetCondition(servingv1.ServiceConditionRoutesReady).IsTrue() ||
		got.Status.ObservedGeneration != 1 || len(got.Status.Traffic) != 1 || got.Status.Traffic[0].RevisionName != "hello-00001" {
		t.Fatalf("Service status after reconcile: %+v", got.Status)
	}

	// A new template makes a new Revision; traffic on latestRevision follows it once Ready.
	got.Spec.Template.Spec.Containers[0].Image = "example.com/hello:v2"
	got.Generation = 2
	_, _ = c.ServingV1().Services("default").Update(ctx, got, metav1.UpdateOptions{})
	for i := 0; i < 3; i++ {
		_ = s.Reconcile(ctx)
	}
	if _, err := c.ServingV1().Revisions("default").Get(ctx, "hello-00002", metav1.GetOptions{}); err != nil {
		t.Fatalf("no Revision for the new template: %v", err)
	}

	// A direct edit of the Service's Route is reverted.
	rt, _ := c.ServingV1().Routes("default").Get(ctx, "hello", metav1.GetOptions{})
	rt.Spec.Traffic = []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: pct(100)}}
	_, _ = c.ServingV1().Routes("default").Update(ctx, rt, metav1.UpdateOptions{})
	_ = s.Reconcile(ctx)
	rt, _ = c.ServingV1().Routes("default").Get(ctx, "hello", metav1.GetOptions{})
	if len(rt.Spec.Traffic) != 1 || rt.Spec.Traffic[0].LatestRevision == nil || !*rt.Spec.Traffic[0].LatestRevision {
		t.Fatalf("Route edit not reverted: %+v", rt.Spec.Traffic)
	}
}
