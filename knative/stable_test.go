package knative

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func revision(name, generation string, ready bool) *servingv1.Revision {
	status := "False"
	if ready {
		status = "True"
	}
	return &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{serving.ConfigurationGenerationLabelKey: generation}},
		Status: servingv1.RevisionStatus{Status: duckv1.Status{Conditions: duckv1.Conditions{
			{Type: apis.ConditionReady, Status: corev1.ConditionStatus(status)},
		}}},
	}
}

func TestStable(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	yes := true
	revs := map[string]*servingv1.Revision{
		"hello-00001": revision("hello-00001", "1", true),
		"hello-00002": revision("hello-00002", "2", true),
		"hello-00003": revision("hello-00003", "3", false),
		"hello-00004": revision("hello-00004", "4", false),
	}
	tests := []struct {
		name    string
		traffic []servingv1.TrafficTarget
		revs    map[string]*servingv1.Revision
		want    string
	}{
		{"most traffic besides the candidate", []servingv1.TrafficTarget{
			{RevisionName: "hello-00001", Percent: p(30)}, {RevisionName: "hello-00002", Percent: p(70)}}, revs, "hello-00002"},
		{"shares of one Revision add up", []servingv1.TrafficTarget{
			{RevisionName: "hello-00001", Percent: p(30)}, {RevisionName: "hello-00001", Percent: p(30), Tag: "a"},
			{RevisionName: "hello-00002", Percent: p(40)}}, revs, "hello-00001"},
		{"latest is the newest Ready Revision older than the candidate", []servingv1.TrafficTarget{
			{LatestRevision: &yes, Percent: p(100)}}, revs, "hello-00002"},
		{"the candidate is never stable", []servingv1.TrafficTarget{
			{RevisionName: "hello-00004", Percent: p(100)}}, revs, "hello-00002"},
		{"a guess without Revisions leaves latest unknown", []servingv1.TrafficTarget{
			{LatestRevision: &yes, Percent: p(100)}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Stable(tt.traffic, "hello-00004", tt.revs); got != tt.want {
				t.Fatalf("Stable = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSameTemplate(t *testing.T) {
	rev := func(name, image string, env ...corev1.EnvVar) *servingv1.Revision {
		r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		r.Spec.Containers = []corev1.Container{{Name: "app", Image: image, Env: env}}
		return r
	}
	v1 := rev("hello-00001", "example.com/hello:v1", corev1.EnvVar{Name: "A", Value: "1"})
	for _, c := range []struct {
		name  string
		other *servingv1.Revision
		same  bool
	}{
		{"same image and env", rev("hello-00003", "example.com/hello:v1", corev1.EnvVar{Name: "A", Value: "1"}), true},
		{"another image", rev("hello-00003", "example.com/hello:v2", corev1.EnvVar{Name: "A", Value: "1"}), false},
		{"another env value", rev("hello-00003", "example.com/hello:v1", corev1.EnvVar{Name: "A", Value: "2"}), false},
		{"more resources", func() *servingv1.Revision {
			r := rev("hello-00003", "example.com/hello:v1", corev1.EnvVar{Name: "A", Value: "1"})
			r.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
			return r
		}(), false},
		{"a sidecar more", func() *servingv1.Revision {
			r := rev("hello-00003", "example.com/hello:v1", corev1.EnvVar{Name: "A", Value: "1"})
			r.Spec.Containers = append(r.Spec.Containers, corev1.Container{Name: "proxy", Image: "envoy"})
			return r
		}(), false},
		{"another scale, labels and annotations", func() *servingv1.Revision {
			r := rev("hello-00003", "example.com/hello:v1", corev1.EnvVar{Name: "A", Value: "1"})
			r.Annotations["autoscaling.knative.dev/min-scale"] = "3"
			r.Labels = map[string]string{"team": "a"}
			return r
		}(), true},
	} {
		if got := SameTemplate(v1, c.other); got != c.same {
			t.Errorf("%s: SameTemplate = %v, want %v", c.name, got, c.same)
		}
	}
	named := rev("hello-00004", "example.com/hello:v9")
	named.Annotations["sluice.dev/release"] = "2026.12"
	v1.Annotations["sluice.dev/release"] = "2026.12"
	if !SameTemplate(v1, named) {
		t.Error("two Revisions of the same named release must be the same")
	}
}
