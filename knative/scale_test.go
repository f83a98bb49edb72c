package knative_test

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

func TestSetScaleChecked(t *testing.T) {
	ctx := context.Background()
	rev := knativefake.Revision(ns, "hello", 2, true)
	rev.Annotations = map[string]string{"autoscaling.knative.dev/minScale": "2", "autoscaling.knative.dev/max-scale": "2"}
	k := knativefake.New(rev)
	c := knative.Client{Serving: k}
	ref := knative.RevisionRef{Namespace: ns, Name: rev.Name}
	bounds := func() knative.ScaleBounds {
		r, err := k.ServingV1().Revisions(ns).Get(ctx, rev.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return knative.BoundsOf(r)
	}

	// What sluice wrote last (under an older key, too): written over, and
	// the older spelling dropped.
	if err := c.SetScaleChecked(ctx, ref, knative.Pods(3), knative.Pods(2)); err != nil {
		t.Fatal(err)
	}
	if got := bounds(); got != knative.Pods(3) {
		t.Fatalf("bounds %+v, want 3", got)
	}
	// The same write again, its answer lost the first time: no drift.
	if err := c.SetScaleChecked(ctx, ref, knative.Pods(3), knative.Pods(2)); err != nil {
		t.Fatalf("repeated write: %v", err)
	}
	// Someone else's bounds are neither: nothing is written.
	if err := c.SetScale(ctx, ref, knative.ScaleBounds{Min: "5"}); err != nil {
		t.Fatal(err)
	}
	err := c.SetScaleChecked(ctx, ref, knative.Pods(4), knative.Pods(3))
	var drift *knative.ScaleDriftError
	if !errors.As(err, &drift) || drift.Found != (knative.ScaleBounds{Min: "5"}) || drift.Last != knative.Pods(3) {
		t.Fatalf("after an edit: %v", err)
	}
	if got := bounds(); got != (knative.ScaleBounds{Min: "5"}) {
		t.Fatalf("bounds %+v after a refused write, want the edit kept", got)
	}
}
