package admission

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Path is where the webhook is served.
const Path = "/admission/pin-latest"

// maxReview bounds a request body: a Service with its status is a few KiB.
const maxReview = 4 << 20

// Handler answers the API server's AdmissionReviews for Service updates.
// It never refuses a write: at worst it lets it through unchanged, and the
// rollout copes as it would without the webhook.
type Handler struct {
	Log *slog.Logger
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
	if err != nil {
		http.Error(w, "read the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.review(r, review.Request)
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func (h *Handler) review(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != admissionv1.Update || req.Kind.Group != servingv1.SchemeGroupVersion.Group || req.Kind.Kind != "Service" {
		return resp
	}
	var old, updated servingv1.Service
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return h.unchanged(resp, req, "cannot read the stored Service: "+err.Error())
	}
	if err := json.Unmarshal(req.Object.Raw, &updated); err != nil {
		return h.unchanged(resp, req, "cannot read the Service written: "+err.Error())
	}
	pin, ok := PinFor(r.Context(), &old, &updated)
	if !ok {
		return resp
	}
	patch, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/traffic", "value": pin.Traffic}})
	if err != nil {
		return h.unchanged(resp, req, "cannot encode the patch: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	resp.Warnings = []string{pin.Note}
	h.Log.Info("pinned latestRevision traffic in a template change", "namespace", req.Namespace, "service", req.Name, "user", req.UserInfo.Username, "note", pin.Note)
	return resp
}

// unchanged lets a write through untouched when the webhook cannot read it,
// and says why in the API server's answer and in the log.
func (h *Handler) unchanged(resp *admissionv1.AdmissionResponse, req *admissionv1.AdmissionRequest, why string) *admissionv1.AdmissionResponse {
	h.Log.Warn("admission: Service write let through unchanged", "namespace", req.Namespace, "name", req.Name, "why", why)
	resp.Warnings = []string{"sluice did not check this write: " + why}
	resp.Result = &metav1.Status{Message: why}
	return resp
}
