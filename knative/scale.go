package knative

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/apis/autoscaling"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// ScaleBounds are a Revision's autoscaling.knative.dev/min-scale and
// max-scale as written ("" when unset). Knative does not copy these two
// into the Revision's pods, so changing them rescales the Revision without
// restarting anything.
type ScaleBounds struct {
	Min string `json:"min,omitempty"`
	Max string `json:"max,omitempty"`
}

// BoundsOf reads a Revision's scale bounds, under Knative's current keys or
// their older spellings.
func BoundsOf(r *servingv1.Revision) ScaleBounds {
	return ScaleBounds{Min: autoscaling.MinScaleAnnotation.Value(r.Annotations), Max: autoscaling.MaxScaleAnnotation.Value(r.Annotations)}
}

// Pods bounds a Revision to exactly n pods.
func Pods(n int32) ScaleBounds {
	v := fmt.Sprint(n)
	return ScaleBounds{Min: v, Max: v}
}

// SetScale writes a Revision's scale bounds with a merge patch under
// Knative's current keys, dropping the older spellings so only one of each
// remains; an empty bound is removed. Writing the same bounds again changes
// nothing.
func (c Client) SetScale(ctx context.Context, ref RevisionRef, b ScaleBounds) error {
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
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
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
