package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/templates"
)

// PolicyPath serves the validating webhook that judges a Service's or
// Configuration's rollout policy as it is written and answers with
// warnings, which kubectl prints; PolicyStrictPath is the same webhook for
// namespaces labelled sluice.dev/admission=strict, where a write that makes
// or changes an invalid policy is refused. The namespace selectors of the
// two webhooks (config/deploy/521-policy-webhook.yaml) decide which path a
// write reaches, so the receiver needs no read of namespaces.
const (
	PolicyPath       = "/admission/policy"
	PolicyStrictPath = "/admission/policy-strict"
)

// policyAnnotations are the annotations of o a person writes to make its
// policy, right or wrong: keys that name sluice, but for those sluice
// writes itself.
func policyAnnotations(o config.Object) map[string]string {
	out := map[string]string{}
	for prefix, m := range map[string]map[string]string{"": o.Metadata.Annotations, "template:": o.Spec.Template.Metadata.Annotations} {
		for k, v := range m {
			if strings.Contains(strings.ToLower(k), "sluice") && !config.WrittenBySluice(k) {
				out[prefix+k] = v
			}
		}
	}
	return out
}

// Warnings are a review's findings as admission warnings: without the
// value found, so each stays short enough for the API server to pass on
// whole.
func Warnings(r config.Review) []string {
	out := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		w := "sluice: " + f.Key + ": " + f.Message
		if f.Severity == config.SeverityWarning {
			w = "sluice (no effect): " + f.Key + ": " + f.Message
		}
		out = append(out, w)
	}
	return out
}

func (h *Handler) policy(ctx context.Context, req *admissionv1.AdmissionRequest, strict bool) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	kind := req.Kind.Kind
	if req.Kind.Group != servingv1.SchemeGroupVersion.Group || (kind != "Service" && kind != "Configuration") ||
		(req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return resp
	}
	var obj config.Object
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return h.unchanged(resp, req, "cannot read the "+kind+" written: "+err.Error())
	}
	obj.Kind = kind
	if obj.ServiceOwned() != "" {
		return resp // Knative's copy of its Service's annotations, judged on the Service
	}
	review := config.ReviewPolicy(obj.Subject(kind), h.Defaults)
	if !review.Relevant() {
		return resp
	}
	resp.Warnings = Warnings(review)
	if w := h.templateWarning(ctx, req.Namespace, review.Policy); w != "" {
		// A warning even in a strict namespace: the template may be
		// applied next, and the rollout refuses itself if it is not.
		resp.Warnings = append(resp.Warnings, w)
	}
	if len(review.Findings) > 0 {
		h.Log.Info("admission: rollout policy has findings", "kind", kind, "namespace", req.Namespace, "name", req.Name,
			"user", req.UserInfo.Username, "errors", review.Errors(), "findings", len(review.Findings), "strict", strict)
	}
	if !strict || review.Errors() == 0 {
		return resp
	}
	if req.Operation == admissionv1.Update {
		// A write that leaves the policy as it was (a new image, sluice's
		// own traffic step) is not the one to refuse: the policy was
		// refused or let through when it was written.
		var old config.Object
		if json.Unmarshal(req.OldObject.Raw, &old) == nil && maps.Equal(policyAnnotations(old), policyAnnotations(obj)) {
			resp.Warnings = append(resp.Warnings, "sluice: this write does not change the invalid policy, so the strict namespace lets it through")
			return resp
		}
	}
	var lines []string
	for _, f := range review.Findings {
		if f.Severity == config.SeverityError {
			lines = append(lines, f.Key+": "+f.Message)
		}
	}
	resp.Allowed = false
	resp.Result = &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: fmt.Sprintf("sluice refuses this %s's rollout policy (namespace %s is labelled sluice.dev/admission=strict): %s",
			kind, req.Namespace, strings.Join(lines, "; ")),
	}
	h.Log.Warn("admission: refused an invalid rollout policy", "kind", kind, "namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username)
	return resp
}

// templateWarning says what is wrong with the analysis template a policy
// names: missing, or not applicable with the policy's arguments. A
// template that cannot be read now is not the writer's mistake: no word.
func (h *Handler) templateWarning(ctx context.Context, namespace string, p *config.Policy) string {
	if h.Templates == nil || p == nil || p.AnalysisTemplate == nil {
		return ""
	}
	ref := *p.AnalysisTemplate
	t, err := h.Templates.Read(ctx, namespace, ref)
	var nf *templates.NotFoundError
	switch {
	case errors.As(err, &nf):
		return "sluice: " + err.Error() + "; a rollout is refused until it exists"
	case err != nil:
		return ""
	}
	if _, err := config.ApplyTemplate(ref, t.Spec, h.Defaults); err != nil {
		return "sluice: " + err.Error() + "; a rollout is refused until it is fixed"
	}
	return ""
}
