package config

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AnnotationPreview names the tag a candidate gets, at 0% of the traffic,
// once it is Ready and before its first share: its URL in the traffic
// object's status, and the Knative-Serving-Tag header with that tag, reach
// the candidate alone while the before-start webhooks try it. The tag is
// removed when the rollout ends, whatever the outcome. E.g. "preview".
const AnnotationPreview = Prefix + "preview"

// TagHeader is the header Knative routes a request by to the target of
// its tag (with its tag-header-based-routing feature on).
const TagHeader = "Knative-Serving-Tag"

// parsePreview reads AnnotationPreview: a tag, which Knative wants a
// DNS-1035 label, as it becomes part of the tag's host name.
func parsePreview(annotations map[string]string, fail func(error)) string {
	raw, ok := annotations[AnnotationPreview]
	if !ok {
		return ""
	}
	tag := strings.TrimSpace(raw)
	if errs := validation.IsDNS1035Label(tag); len(errs) > 0 {
		fail(&FieldError{Key: AnnotationPreview, Value: raw,
			Message: "must be a tag for the candidate, a DNS-1035 label such as \"preview\": " + strings.Join(errs, "; ")})
		return ""
	}
	return tag
}
