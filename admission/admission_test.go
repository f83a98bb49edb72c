package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
)

func svc(image string, optedIn bool, traffic ...servingv1.TrafficTarget) *servingv1.Service {
	s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello", Annotations: map[string]string{}}}
	if optedIn {
		s.Annotations["sluice.dev/rollout"] = "enabled"
	}
	s.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
	s.Spec.Traffic = traffic
	s.Status.LatestReadyRevisionName = "hello-00001"
	return s
}

func latest(pct int64, tag string) servingv1.TrafficTarget {
	t, p := true, pct
	return servingv1.TrafficTarget{LatestRevision: &t, Percent: &p, Tag: tag}
}

func named(rev string, pct int64, tag string) servingv1.TrafficTarget {
	p := pct
	return servingv1.TrafficTarget{RevisionName: rev, Percent: &p, Tag: tag}
}

func TestPinFor(t *testing.T) {
	tests := []struct {
		name     string
		old, new *servingv1.Service
		want     string // "" for no pin
	}{
		{"a new image with all traffic on the latest Revision", svc("v1", true, latest(100, "")), svc("v2", true, latest(100, "")),
			"hello-00001=100%"},
		{"no traffic given: Knative's default is all on the latest Revision", svc("v1", true), svc("v2", true), "hello-00001=100%"},
		{"a 0% latestRevision tag stays", svc("v1", true, latest(90, ""), latest(0, "latest"), named("hello-00000", 10, "old")),
			svc("v2", true, latest(90, ""), latest(0, "latest"), named("hello-00000", 10, "old")),
			"hello-00001=90%, latest=0% (tag latest), hello-00000=10% (tag old)"},
		{"not opted in", svc("v1", false, latest(100, "")), svc("v2", false, latest(100, "")), ""},
		{"no template change", svc("v1", true, latest(100, "")), svc("v1", true, latest(100, "")), ""},
		{"already pinned by name", svc("v1", true, named("hello-00001", 100, "")), svc("v2", true, named("hello-00001", 100, "")), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pin, ok := PinFor(context.Background(), tt.old, tt.new)
			if tt.want == "" {
				if ok {
					t.Fatalf("pinned %s, want no change", knative.FormatTraffic(pin.Traffic))
				}
				return
			}
			if !ok || knative.FormatTraffic(pin.Traffic) != tt.want || !strings.Contains(pin.Note, "to hello-00001") {
				t.Fatalf("pin %v %s (%s), want %s", ok, knative.FormatTraffic(pin.Traffic), pin.Note, tt.want)
			}
			if err := knative.ValidateTraffic(knative.KindService, pin.Traffic); err != nil {
				t.Fatalf("pinned list is invalid: %v", err)
			}
		})
	}
	// The first Revision has nothing to keep traffic on.
	first := svc("v1", true, latest(100, ""))
	first.Status.LatestReadyRevisionName = ""
	if _, ok := PinFor(context.Background(), first, svc("v2", true, latest(100, ""))); ok {
		t.Fatal("pinned with no Ready Revision")
	}
}

func review(t *testing.T, old, updated *servingv1.Service) admissionv1.AdmissionReview {
	t.Helper()
	raw := func(o runtime.Object) runtime.RawExtension {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "42", Operation: admissionv1.Update, Namespace: "default", Name: "hello",
			Kind:   metav1.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"},
			Object: raw(updated), OldObject: raw(old),
		},
	}
}

func post(t *testing.T, h http.Handler, body []byte) (int, admissionv1.AdmissionReview) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	var out admissionv1.AdmissionReview
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer: %v: %s", err, rec.Body)
		}
	}
	return rec.Code, out
}

func TestHandlerPatchesTheWrite(t *testing.T) {
	h := &Handler{Log: slog.New(slog.DiscardHandler)}
	updated := svc("v2", true, latest(100, ""), latest(0, "latest"))
	in, _ := json.Marshal(review(t, svc("v1", true, latest(100, ""), latest(0, "latest")), updated))
	code, out := post(t, h, in)
	if code != http.StatusOK || out.Response == nil || !out.Response.Allowed || out.Response.UID != "42" || out.Response.PatchType == nil {
		t.Fatalf("answer %d %+v", code, out.Response)
	}
	// Apply the patch as the API server would.
	doc, _ := json.Marshal(updated)
	patch, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got servingv1.Service
	_ = json.Unmarshal(patched, &got)
	if s := knative.FormatTraffic(got.Spec.Traffic); s != "hello-00001=100%, latest=0% (tag latest)" {
		t.Fatalf("patched traffic %s", s)
	}
	if len(out.Response.Warnings) != 1 || !strings.Contains(out.Response.Warnings[0], "sluice pinned 1 latestRevision") {
		t.Fatalf("warnings %v", out.Response.Warnings)
	}

	// Anything else is let through untouched; garbage is a 400.
	other := review(t, svc("v1", false), svc("v2", false))
	in, _ = json.Marshal(other)
	if code, out := post(t, h, in); code != http.StatusOK || !out.Response.Allowed || out.Response.Patch != nil {
		t.Fatalf("not opted in: %d %+v", code, out.Response)
	}
	if code, _ := post(t, h, []byte("{")); code != http.StatusBadRequest {
		t.Fatalf("garbage: %d", code)
	}
}

func TestSharedCertsAndCABundle(t *testing.T) {
	hosts := []string{"sluice-receiver.sluice-system.svc", "127.0.0.1"}
	kube := fake.NewSimpleClientset(&admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-pin-latest", ResourceVersion: "1"},
		Webhooks:   []admissionregv1.MutatingWebhook{{Name: "pin-latest.sluice.dev"}},
	}, &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-policy", ResourceVersion: "1"},
		Webhooks:   []admissionregv1.ValidatingWebhook{{Name: "policy.sluice.dev"}, {Name: "policy-strict.sluice.dev"}},
	})
	ctx := context.Background()
	now := time.Now()
	first, err := SharedCerts(ctx, kube, "sluice-system", "certs", hosts, now)
	if err != nil || !usable(first, hosts, now) {
		t.Fatalf("first: %v", err)
	}
	// A second replica reads the same certificates.
	again, err := SharedCerts(ctx, kube, "sluice-system", "certs", hosts, now)
	if err != nil || !bytes.Equal(again.Cert, first.Cert) {
		t.Fatalf("second replica made its own: %v", err)
	}
	// Other hosts, or near the end of their life: made anew.
	if renewed, err := SharedCerts(ctx, kube, "sluice-system", "certs", hosts, now.Add(certLifetime-certRenew/2)); err != nil || bytes.Equal(renewed.Cert, first.Cert) {
		t.Fatalf("not renewed near the end: %v", err)
	}
	if changed, err := InjectCABundle(ctx, kube, Mutating, "sluice-pin-latest", first.CA); err != nil || !changed {
		t.Fatalf("inject: %v %v", changed, err)
	}
	cfg, _ := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "sluice-pin-latest", metav1.GetOptions{})
	if !bytes.Equal(cfg.Webhooks[0].ClientConfig.CABundle, first.CA) {
		t.Fatal("caBundle not written")
	}
	if changed, err := InjectCABundle(ctx, kube, Mutating, "sluice-pin-latest", first.CA); err != nil || changed {
		t.Fatalf("second inject: %v %v", changed, err)
	}
	if changed, err := InjectCABundle(ctx, kube, Validating, "sluice-policy", first.CA); err != nil || !changed {
		t.Fatalf("inject the policy webhook's: %v %v", changed, err)
	}
	policy, _ := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "sluice-policy", metav1.GetOptions{})
	for _, wh := range policy.Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, first.CA) {
			t.Fatalf("caBundle of %s not written", wh.Name)
		}
	}
}
