package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/templates"
)

// reviewPolicy sends one AdmissionReview of a Service write to the policy
// webhook, as the API server would, and returns the answer.
func reviewPolicy(t *testing.T, path string, op admissionv1.Operation, old, updated *servingv1.Service) *admissionv1.AdmissionResponse {
	t.Helper()
	h := &Handler{Log: slog.New(slog.DiscardHandler), Defaults: config.BuiltinDefaults()}
	raw := func(s *servingv1.Service) runtime.RawExtension {
		if s == nil {
			return runtime.RawExtension{}
		}
		b, _ := json.Marshal(s)
		return runtime.RawExtension{Raw: b}
	}
	review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: op, Namespace: "default", Name: "hello",
			Kind:   metav1.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"},
			Object: raw(updated), OldObject: raw(old)}}
	body, _ := json.Marshal(review)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("answer %s: %v", rec.Body, err)
	}
	return out.Response
}

func withAnnotations(image string, annotations map[string]string) *servingv1.Service {
	s := svc(image, false)
	for k, v := range annotations {
		s.Annotations[k] = v
	}
	return s
}

func TestPolicyWebhookWarnsAndStrictRefuses(t *testing.T) {
	typo := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/gate": "100"}
	wantWarning := "sluice: sluice.dev/gate: is not a sluice annotation, and sluice would ignore it; did you mean sluice.dev/gates?"

	resp := reviewPolicy(t, PolicyPath, admissionv1.Create, nil, withAnnotations("v1", typo))
	if !resp.Allowed || len(resp.Warnings) != 1 || resp.Warnings[0] != wantWarning {
		t.Fatalf("default namespace: allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}

	resp = reviewPolicy(t, PolicyStrictPath, admissionv1.Create, nil, withAnnotations("v1", typo))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(resp.Result.Message, "did you mean sluice.dev/gates?") || !strings.Contains(resp.Result.Message, "sluice.dev/admission=strict") {
		t.Fatalf("strict namespace: allowed %v, result %+v", resp.Allowed, resp.Result)
	}

	// In a strict namespace a write that leaves an invalid policy as it was
	// (a new image; sluice's own writes) passes, with the warnings.
	resp = reviewPolicy(t, PolicyStrictPath, admissionv1.Update, withAnnotations("v1", typo), withAnnotations("v2", typo))
	if !resp.Allowed || len(resp.Warnings) != 2 || resp.Warnings[0] != wantWarning {
		t.Fatalf("strict, policy unchanged: allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}
	// ... but one that changes it is judged again.
	worse := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/gate": "100", "sluice.dev/steps": "50,20"}
	if resp = reviewPolicy(t, PolicyStrictPath, admissionv1.Update, withAnnotations("v1", typo), withAnnotations("v1", worse)); resp.Allowed {
		t.Fatal("strict: a write that changes an invalid policy was let through")
	}

	// A warning (no effect) never refuses, even in a strict namespace.
	noEffect := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/step-holds": "100=1h"}
	if resp = reviewPolicy(t, PolicyStrictPath, admissionv1.Create, nil, withAnnotations("v1", noEffect)); !resp.Allowed ||
		len(resp.Warnings) != 1 || !strings.HasPrefix(resp.Warnings[0], "sluice (no effect): sluice.dev/step-holds:") {
		t.Fatalf("no-effect setting: allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}

	// Near misses of the opt-in are warned of too.
	misplaced := svc("v1", false)
	misplaced.Spec.Template.Annotations = map[string]string{"sluice.dev/rollout": "enabled"}
	if resp = reviewPolicy(t, PolicyPath, admissionv1.Create, nil, misplaced); len(resp.Warnings) != 1 ||
		!strings.Contains(resp.Warnings[0], "spec.template.metadata.annotations, where sluice never reads it") {
		t.Fatalf("policy on the template: warnings %q", resp.Warnings)
	}

	// A valid policy and a Service without sluice annotations: silence.
	for name, s := range map[string]*servingv1.Service{
		"valid":      withAnnotations("v1", map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/gates": "100"}),
		"not sluice": svc("v1", false),
	} {
		if resp = reviewPolicy(t, PolicyStrictPath, admissionv1.Create, nil, s); !resp.Allowed || len(resp.Warnings) != 0 {
			t.Errorf("%s: allowed %v, warnings %q", name, resp.Allowed, resp.Warnings)
		}
	}
}

// Knative copies a Service's annotations onto the Configuration it makes:
// that copy is judged on the Service, never refused as a Configuration
// without its Route — in a strict namespace too.
func TestPolicyWebhookLeavesAServicesConfigurationAlone(t *testing.T) {
	h := &Handler{Log: slog.New(slog.DiscardHandler), Defaults: config.BuiltinDefaults()}
	cfg := servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello",
		Labels:      map[string]string{"serving.knative.dev/service": "hello"},
		Annotations: map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/steps": "10,100"}}}
	raw, _ := json.Marshal(&cfg)
	req := &admissionv1.AdmissionRequest{UID: "u2", Operation: admissionv1.Create, Namespace: "default", Name: "hello",
		Kind: metav1.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Configuration"}, Object: runtime.RawExtension{Raw: raw}}
	if resp := h.policy(context.Background(), req, true); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Fatalf("a Service's Configuration: allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}
	// One of its own, in Route mode, is judged: here it names no Route.
	delete(cfg.Labels, "serving.knative.dev/service")
	raw, _ = json.Marshal(&cfg)
	req.Object.Raw = raw
	if resp := h.policy(context.Background(), req, true); resp.Allowed || !strings.Contains(resp.Result.Message, "sluice.dev/route: a Configuration must name the Route") {
		t.Fatalf("a Configuration of its own without a Route: allowed %v, result %+v", resp.Allowed, resp.Result)
	}
}

// templateStore answers reads of analysis templates from a map.
type templateStore map[string]config.TemplateSpec

func (s templateStore) Read(_ context.Context, namespace string, ref config.TemplateRef) (templates.Template, error) {
	spec, ok := s[ref.String()]
	if !ok {
		return templates.Template{}, &templates.NotFoundError{Ref: ref, Namespace: namespace}
	}
	return templates.Template{Spec: spec}, nil
}

// A policy naming a missing template, or one its arguments do not fit, is
// let through with a warning, in a strict namespace too.
func TestPolicyWebhookWarnsOfTemplates(t *testing.T) {
	h := &Handler{Log: slog.New(slog.DiscardHandler), Defaults: config.BuiltinDefaults(), Templates: templateStore{
		"cluster/standard": {Analysis: "prometheus: http://prometheus:9090\nchecks:\n  - {name: p99, builtin: latency-p99, max: {{args.p99}}}\n", Args: []config.TemplateArg{{Name: "p99"}}},
	}}
	for _, c := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{"sluice.dev/analysis-template": "cluster/standard", "sluice.dev/analysis-args": "p99=300"}, ""},
		{map[string]string{"sluice.dev/analysis-template": "standard"}, "sluice: sluice.dev/analysis-template: AnalysisTemplate default/standard not found"},
		{map[string]string{"sluice.dev/analysis-template": "cluster/standard"}, "argument p99 has no value"},
	} {
		ann := map[string]string{"sluice.dev/rollout": "enabled"}
		maps.Copy(ann, c.ann)
		raw, _ := json.Marshal(withAnnotations("v1", ann))
		req := &admissionv1.AdmissionRequest{UID: "u3", Operation: admissionv1.Create, Namespace: "default", Name: "hello",
			Kind: metav1.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}, Object: runtime.RawExtension{Raw: raw}}
		resp := h.policy(context.Background(), req, true)
		got := strings.Join(resp.Warnings, "\n")
		if !resp.Allowed || (c.want == "" && got != "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: allowed %v, warnings %q, want %q", c.ann, resp.Allowed, got, c.want)
		}
	}
}
