package knative

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/kmap"
	"knative.dev/serving/pkg/apis/autoscaling"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
)

// ScaleBounds are a Revision's autoscaling.knative.dev/min-scale and
// max-scale as written ("" when unset). Knative does not copy these two
// into the Revision's pods, so changing them rescales the Revision without
// restarting anything.
type ScaleBounds struct {
	Min string `json:"min,omitempty"`
	Max string `json:"max,omitempty"`
}

// MinPods is the minimum as a pod count: 0 when unset or not a number
// (Knative's webhook admits only integers).
func (b ScaleBounds) MinPods() int32 {
	n, err := strconv.ParseInt(b.Min, 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// BoundsOf reads a Revision's scale bounds, under Knative's current keys or
// their older spellings.
func BoundsOf(r *servingv1.Revision) ScaleBounds {
	return ScaleBounds{Min: autoscaling.MinScaleAnnotation.Value(r.Annotations), Max: autoscaling.MaxScaleAnnotation.Value(r.Annotations)}
}

// TemplateBounds are the scale bounds a Revision's template set: those
// sluice's admission webhook recorded when it bounded the new Revision, or
// else its bounds as written.
func TemplateBounds(r *servingv1.Revision) ScaleBounds {
	var b ScaleBounds
	if raw, ok := r.Annotations[config.AnnotationTemplateScale]; ok && json.Unmarshal([]byte(raw), &b) == nil {
		return b
	}
	return BoundsOf(r)
}

// BoundAnnotations returns a copy of a new Revision's annotations that
// bounds it to n pods and records its template's bounds for
// TemplateBounds.
func BoundAnnotations(annotations map[string]string, n int32) (map[string]string, error) {
	tmpl, err := json.Marshal(BoundsOf(&servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}))
	if err != nil {
		return nil, fmt.Errorf("encode the template's scale bounds: %w", err)
	}
	out := kmap.ExcludeKeyList(annotations, append(append([]string(nil), autoscaling.MinScaleAnnotation...), autoscaling.MaxScaleAnnotation...))
	v := fmt.Sprint(n)
	out[autoscaling.MinScaleAnnotationKey], out[autoscaling.MaxScaleAnnotationKey] = v, v
	out[config.AnnotationTemplateScale] = string(tmpl)
	return out, nil
}

// Pods bounds a Revision to exactly n pods.
func Pods(n int32) ScaleBounds {
	v := fmt.Sprint(n)
	return ScaleBounds{Min: v, Max: v}
}

// ScaleDriftError says someone else changed a Revision's scale bounds since
// sluice last wrote them.
type ScaleDriftError struct {
	Revision    string
	Found, Last ScaleBounds
}

func (e *ScaleDriftError) Error() string {
	return fmt.Sprintf("the scale bounds of Revision %s were changed by someone else: min %q max %q, where sluice last wrote min %q max %q",
		e.Revision, e.Found.Min, e.Found.Max, e.Last.Min, e.Last.Max)
}

// SetScaleChecked writes a Revision's scale bounds as SetScale does, after
// checking that they are still last (what sluice wrote before) or already
// b (a repeated write whose answer was lost); otherwise it writes nothing
// and answers a *ScaleDriftError. The write carries the resourceVersion it
// checked, so an edit in between is a conflict, not a lost change.
func (c Client) SetScaleChecked(ctx context.Context, ref RevisionRef, b, last ScaleBounds) error {
	r, err := c.Serving.ServingV1().Revisions(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read Revision %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if now := BoundsOf(r); now != last && now != b {
		return &ScaleDriftError{Revision: ref.Namespace + "/" + ref.Name, Found: now, Last: last}
	}
	return c.setScale(ctx, ref, b, r.ResourceVersion)
}

// SetScale writes a Revision's scale bounds with a merge patch under
// Knative's current keys, dropping the older spellings so only one of each
// remains; an empty bound is removed. Writing the same bounds again changes
// nothing.
func (c Client) SetScale(ctx context.Context, ref RevisionRef, b ScaleBounds) error {
	return c.setScale(ctx, ref, b, "")
}

func (c Client) setScale(ctx context.Context, ref RevisionRef, b ScaleBounds, resourceVersion string) error {
	ann := map[string]any{}
	for _, kv := range []struct {
		keys  []string
		value string
	}{{autoscaling.MinScaleAnnotation, b.Min}, {autoscaling.MaxScaleAnnotation, b.Max}} {
		for i, k := range kv.keys {
			ann[k] = nil
			if i == 0 && kv.value != "" {
				ann[k] = kv.value
			}
		}
	}
	meta := map[string]any{"annotations": ann}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encode scale bounds: %w", err)
	}
	_, err = c.Serving.ServingV1().Revisions(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("set the scale bounds of Revision %s/%s to min %q max %q: %w", ref.Namespace, ref.Name, b.Min, b.Max, err)
	}
	return nil
}

// AwaitPods answers once the Revision reports at least want Ready pods
// (status.actualReplicas, which Knative takes from its PodAutoscaler) — or,
// with atMost, no more than want — has failed or is gone, watching it; or
// with its state when ctx ends. A Revision that is gone is Found false.
func (c Client) AwaitPods(ctx context.Context, ref RevisionRef, want int32, atMost bool) (RevisionState, error) {
	return c.awaitState(ctx, ref, func(st RevisionState) bool {
		if atMost {
			return st.Pods <= want || !st.Found
		}
		return st.Pods >= want || st.Failed || !st.Found
	})
}

// AwaitReserve answers once Knative has put the Revision in reserve (no
// route names it any more), or it is gone, watching it; or with its state
// when ctx ends.
func (c Client) AwaitReserve(ctx context.Context, ref RevisionRef) (RevisionState, error) {
	return c.awaitState(ctx, ref, func(st RevisionState) bool { return st.Reserve || !st.Found })
}
