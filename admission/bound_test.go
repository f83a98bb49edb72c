package admission

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingfake "knative.dev/serving/pkg/client/clientset/versioned/fake"

	"github.com/sluicehq/sluice/knative"
)

// capacitySvc is a Service served by hello-00001 with the given policy.
func capacitySvc(ann map[string]string) *servingv1.Service {
	s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello", Annotations: ann}}
	p := int64(100)
	s.Status.Traffic = []servingv1.TrafficTarget{{RevisionName: "hello-00001", Percent: &p}}
	return s
}

func newRevision(name string, ann map[string]string) *servingv1.Revision {
	return &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: ann,
		Labels: map[string]string{"serving.knative.dev/service": "hello", "serving.knative.dev/configuration": "hello"}}}
}

func TestBoundFor(t *testing.T) {
	capacityOn := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability"}
	minScale := map[string]string{"autoscaling.knative.dev/min-scale": "8", "autoscaling.knative.dev/maxScale": "12", "other": "kept"}
	tests := []struct {
		name string
		svc  *servingv1.Service
		rev  *servingv1.Revision
		want map[string]string // nil: no bounds
	}{
		{"capacity mode: one pod, the template's bounds recorded (older spellings too)", capacitySvc(capacityOn), newRevision("hello-00002", minScale),
			map[string]string{"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "1", "other": "kept",
				"sluice.dev/template-scale": `{"min":"8","max":"12"}`}},
		{"a template without bounds", capacitySvc(capacityOn), newRevision("hello-00002", nil),
			map[string]string{"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "1", "sluice.dev/template-scale": `{}`}},
		{"with analysis checks on the worker's Prometheus (which the webhook does not know)", capacitySvc(map[string]string{
			"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability",
			"sluice.dev/analysis": "checks: [{name: success-rate, builtin: success-rate}]"}), newRevision("hello-00002", minScale),
			map[string]string{"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "1", "other": "kept",
				"sluice.dev/template-scale": `{"min":"8","max":"12"}`}},
		{"no capacity mode", capacitySvc(map[string]string{"sluice.dev/rollout": "enabled"}), newRevision("hello-00002", minScale), nil},
		{"not opted in", capacitySvc(map[string]string{"sluice.dev/capacity": "availability"}), newRevision("hello-00002", minScale), nil},
		{"a policy that does not parse: its rollout fails, so nothing would lift the bounds", capacitySvc(map[string]string{
			"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "availability", "sluice.dev/capacity-surge": "lots"}), newRevision("hello-00002", minScale), nil},
		{"the first Revision: nothing serves yet", capacitySvc(capacityOn), newRevision("hello-00001", minScale), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := knative.Client{Serving: servingfake.NewSimpleClientset(tc.svc)}
			b, ok, err := BoundFor(context.Background(), k, tc.rev)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.want != nil) {
				t.Fatalf("bounded %v, want %v (%+v)", ok, tc.want != nil, b)
			}
			if !ok {
				return
			}
			if len(b.Annotations) != len(tc.want) {
				t.Errorf("annotations %v, want %v", b.Annotations, tc.want)
			}
			for k, v := range tc.want {
				if b.Annotations[k] != v {
					t.Errorf("%s = %q, want %q", k, b.Annotations[k], v)
				}
			}
			got := knative.TemplateBounds(&servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Annotations: b.Annotations}})
			if want := knative.BoundsOf(tc.rev); got != want {
				t.Errorf("template bounds read back %+v, want %+v", got, want)
			}
		})
	}

	// A target sluice cannot read is an error: the webhook lets the
	// Revision through and says why.
	if _, _, err := BoundFor(context.Background(), knative.Client{Serving: servingfake.NewSimpleClientset()}, newRevision("hello-00002", nil)); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("missing Service: %v", err)
	}
}

func TestHandlerBoundsANewRevision(t *testing.T) {
	k := knative.Client{Serving: servingfake.NewSimpleClientset(capacitySvc(map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/capacity": "resource"}))}
	h := &Handler{Knative: k, Log: slog.New(slog.DiscardHandler)}
	rev := newRevision("hello-00002", map[string]string{"autoscaling.knative.dev/min-scale": "8"})
	raw, _ := json.Marshal(rev)
	in, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "7", Operation: admissionv1.Create, Namespace: "default", Name: "hello-00002",
			Kind: metav1.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Revision"}, Object: runtime.RawExtension{Raw: raw}},
	})
	code, out := post(t, h, in)
	if code != http.StatusOK || out.Response == nil || !out.Response.Allowed || out.Response.Patch == nil {
		t.Fatalf("answer %d %+v", code, out.Response)
	}
	patch, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	var got servingv1.Revision
	_ = json.Unmarshal(patched, &got)
	if b := knative.BoundsOf(&got); b != knative.Pods(1) {
		t.Errorf("bounds after the patch %+v, want one pod", b)
	}
	if b := knative.TemplateBounds(&got); b.Min != "8" || b.Max != "" {
		t.Errorf("template bounds after the patch %+v", b)
	}
	if len(out.Response.Warnings) != 1 || !strings.Contains(out.Response.Warnings[0], "bounded the new Revision default/hello-00002") {
		t.Errorf("warnings %v", out.Response.Warnings)
	}

	// A Revision of a Service sluice cannot read goes through untouched,
	// with the reason.
	h.Knative = knative.Client{Serving: servingfake.NewSimpleClientset()}
	code, out = post(t, h, in)
	if code != http.StatusOK || !out.Response.Allowed || out.Response.Patch != nil || len(out.Response.Warnings) != 1 ||
		!strings.Contains(out.Response.Warnings[0], "bounds its pods only as it starts") {
		t.Fatalf("unreadable target: %d %+v", code, out.Response)
	}
}
