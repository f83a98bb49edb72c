// Package admission is sluice's mutating admission webhook for opted-in
// Knative Services. It closes a race no rollout can win afterwards: when a
// write changes a Service's template while its traffic follows the latest
// Revision (`latestRevision: true` with a share), Knative routes that whole
// share to the new Revision the moment it is Ready — before its rollout has
// even read the Service. The webhook pins those targets, in the same write,
// to the Revision they serve now, so the new Revision starts at 0% and its
// rollout moves it step by step.
package admission

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// Pin is what the webhook changes in a Service write: its new traffic list
// and, for the user, what it did.
type Pin struct {
	Traffic []servingv1.TrafficTarget
	Note    string
}

// PinFor decides whether the update from old to updated needs its
// latestRevision traffic pinned, and to what. It needs a pin only if the
// Service is opted in, the write creates a Revision (its template changes,
// compared after Knative's own defaulting, so a defaulted field is no
// change), some latestRevision target carries traffic, and a Ready Revision
// serves it now.
func PinFor(ctx context.Context, old, updated *servingv1.Service) (Pin, bool) {
	if on, err := config.OptedIn(updated.Annotations); err != nil || !on {
		return Pin{}, false
	}
	serving := old.Status.LatestReadyRevisionName
	if serving == "" {
		return Pin{}, false // the first Revision: nothing to keep its traffic on
	}
	before, after := old.DeepCopy(), updated.DeepCopy()
	before.SetDefaults(ctx)
	after.SetDefaults(ctx)
	if equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template) {
		return Pin{}, false
	}
	traffic, pinned := knative.PinLatest(knative.DefaultTraffic(updated.Spec.Traffic), nil, serving)
	if pinned == 0 {
		return Pin{}, false
	}
	return Pin{Traffic: traffic, Note: fmt.Sprintf(
		"sluice pinned %d latestRevision traffic target(s) of Service %s/%s to %s, the Revision serving them now, so the new Revision's rollout starts from 0%%",
		pinned, updated.Namespace, updated.Name, serving)}, true
}
