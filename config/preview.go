package config

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AnnotationPreview names the tag a candidate gets, at 0% of the traffic,
// once it is Ready and before its first share: its URL in the traffic
// object's status, and the Knative-Serving-Tag header with that tag, reach
// the candidate alone while the before-start webhooks try it. The tag is
// removed when the rollout ends, whatever the outcome. E.g. "preview".
const AnnotationPreview = Prefix + "preview"

// AnnotationPreviewHold holds the preview for this long before the first
// share, with the policy's analysis — its checks and hold webhooks, every
// interval, then a closing round — judging the traffic that webhooks or a
// load test send to the tag. E.g. "5m".
const AnnotationPreviewHold = Prefix + "preview-hold"

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

// parsePreviewHold reads AnnotationPreviewHold, which needs a preview tag
// and analysis to hold for, and no capacity plan (whose stages follow the
// steps one for one).
func parsePreviewHold(annotations map[string]string, p Policy, fail func(error)) time.Duration {
	raw, ok := annotations[AnnotationPreviewHold]
	if !ok {
		return 0
	}
	d, err := parseDuration(AnnotationPreviewHold, raw, false)
	if err != nil {
		fail(err)
		return 0
	}
	switch {
	case p.Preview == "":
		fail(&FieldError{Key: AnnotationPreviewHold, Value: raw, Message: "holds a preview, but " + AnnotationPreview + " gives the candidate no preview tag; set it, or remove this"})
	case p.Analysis == nil && p.AnalysisTemplate == nil:
		fail(&FieldError{Key: AnnotationPreviewHold, Value: raw, Message: "holds the preview for analysis, but the policy has none (" + AnnotationAnalysis + " or " + AnnotationAnalysisTemplate + ")"})
	case p.Capacity != nil:
		fail(&FieldError{Key: AnnotationPreviewHold, Value: raw, Message: "cannot be combined with " + AnnotationCapacity + " yet: a capacity plan's stages follow the steps one for one"})
	}
	return d
}
