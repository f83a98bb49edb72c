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

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/templates"
)

// Path is where the webhook that pins latestRevision traffic is served,
// BoundPath the one that bounds new Revisions; one Handler answers both.
const (
	Path      = "/admission/pin-latest"
	BoundPath = "/admission/bound-revision"
)

// maxReview bounds a request body: a Service with its status is a few KiB.
const maxReview = 4 << 20

// Handler answers the API server's AdmissionReviews for Service updates
// and Revision creations. It never refuses a write: at worst it lets it
// through unchanged, and the rollout copes as it would without the webhook.
type Handler struct {
	// Knative reads the target a new Revision belongs to.
	Knative knative.Client
	Log     *slog.Logger
	// Defaults are the worker's policy defaults, for the policy webhook.
	Defaults config.Defaults
	// Templates reads the analysis templates policies name; nil skips
	// the check.
	Templates templates.Source
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
	var resp *admissionv1.AdmissionResponse
	switch r.URL.Path {
	case PolicyPath, PolicyStrictPath:
		resp = h.policy(r.Context(), review.Request, r.URL.Path == PolicyStrictPath)
	default:
		resp = h.review(r, review.Request)
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func (h *Handler) review(r *http.Request, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Group != servingv1.SchemeGroupVersion.Group {
		return resp
	}
	switch {
	case req.Operation == admissionv1.Update && req.Kind.Kind == "Service":
		return h.pin(r, req, resp)
	case req.Operation == admissionv1.Create && req.Kind.Kind == "Revision":
		return h.bound(r, req, resp)
	}
	return resp
}

func (h *Handler) pin(r *http.Request, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) *admissionv1.AdmissionResponse {
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
	if !h.patch(resp, req, "/spec/traffic", pin.Traffic, pin.Note) {
		return resp
	}
	h.Log.Info("pinned latestRevision traffic in a template change", "namespace", req.Namespace, "service", req.Name, "user", req.UserInfo.Username, "note", pin.Note)
	return resp
}

func (h *Handler) bound(r *http.Request, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) *admissionv1.AdmissionResponse {
	var rev servingv1.Revision
	if err := json.Unmarshal(req.Object.Raw, &rev); err != nil {
		return h.unchanged(resp, req, "cannot read the Revision written: "+err.Error())
	}
	if rev.Namespace == "" {
		rev.Namespace = req.Namespace
	}
	b, ok, err := BoundFor(r.Context(), h.Knative, &rev)
	switch {
	case err != nil:
		return h.unchanged(resp, req, "cannot read the target of Revision "+rev.Name+", so its rollout bounds its pods only as it starts: "+err.Error())
	case !ok:
		return resp
	}
	if !h.patch(resp, req, "/metadata/annotations", b.Annotations, b.Note) {
		return resp
	}
	h.Log.Info("bounded a new Revision to its first capacity stage", "namespace", rev.Namespace, "revision", rev.Name, "note", b.Note)
	return resp
}

// patch answers with one JSON patch that sets path to value, and a warning
// that says what it did; false (and the write unchanged) if it cannot.
func (h *Handler) patch(resp *admissionv1.AdmissionResponse, req *admissionv1.AdmissionRequest, path string, value any, note string) bool {
	patch, err := json.Marshal([]map[string]any{{"op": "add", "path": path, "value": value}})
	if err != nil {
		h.unchanged(resp, req, "cannot encode the patch: "+err.Error())
		return false
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	resp.Warnings = []string{note}
	return true
}

// unchanged lets a write through untouched when the webhook cannot read it,
// and says why in the API server's answer and in the log.
func (h *Handler) unchanged(resp *admissionv1.AdmissionResponse, req *admissionv1.AdmissionRequest, why string) *admissionv1.AdmissionResponse {
	h.Log.Warn("admission: write let through unchanged", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "why", why)
	resp.Warnings = []string{"sluice did not check this write: " + why}
	resp.Result = &metav1.Status{Message: why}
	return resp
}
