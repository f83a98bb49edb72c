package admission

import (
	"context"
	"errors"
	"fmt"

	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// A capacity rollout (docs/capacity.md) bounds its candidate to its first
// stage as soon as it starts, but Knative's autoscaler acts on a new
// Revision's min-scale the moment the Revision is created: a template that
// says min-scale 8 has 8 candidate pods running beside the stable's before
// any rollout has read the Revision. So the webhook bounds a new Revision of
// an opted-in capacity target to one pod in the very write that creates it,
// and records what its template asked; the rollout raises it stage by stage
// and gives the template's bounds back at its end.

// Bound is what the webhook changes in a Revision's creation: its
// annotations and, for the user, what it did.
type Bound struct {
	Annotations map[string]string
	Note        string
}

// firstPods is what a bounded Revision starts with: Knative needs one
// Ready pod to make a Revision Ready, and no first stage has fewer.
const firstPods = 1

// BoundFor decides whether a new Revision needs bounds. It does when its
// Service (or, in Route mode, its Configuration) is opted in with a policy
// that parses and turns capacity mode on, and another Revision serves the
// target now (the first Revision has no rollout). An error means the
// webhook could not read the target; the Revision is then let through
// unbounded and its rollout bounds it as it starts.
func BoundFor(ctx context.Context, k knative.Client, rev *servingv1.Revision) (Bound, bool, error) {
	ref := knative.TargetRef{Namespace: rev.Namespace, Kind: knative.KindService, Name: rev.Labels[serving.ServiceLabelKey]}
	if ref.Name == "" {
		ref.Kind, ref.Name = knative.KindConfiguration, rev.Labels[serving.ConfigurationLabelKey]
	}
	if ref.Name == "" {
		return Bound{}, false, nil
	}
	t, err := k.ReadTarget(ctx, ref)
	switch {
	case errors.Is(err, knative.ErrNoRoute):
		return Bound{}, false, nil
	case err != nil:
		return Bound{}, false, err
	}
	if on, err := t.OptedIn(); err != nil || !on {
		return Bound{}, false, nil
	}
	policy, err := config.FromAnnotations(t.Annotations, workerDefaults())
	if err != nil || policy.Capacity == nil {
		return Bound{}, false, nil
	}
	stable := ""
	for _, tr := range t.Live.Status {
		if tr.RevisionName != "" && tr.RevisionName != rev.Name && knative.Percent(tr) > 0 {
			stable = tr.RevisionName
			break
		}
	}
	if stable == "" {
		return Bound{}, false, nil
	}
	ann, err := knative.BoundAnnotations(rev.Annotations, firstPods)
	if err != nil {
		return Bound{}, false, err
	}
	return Bound{Annotations: ann, Note: fmt.Sprintf(
		"sluice bounded the new Revision %s/%s of %s to %d pod (min-scale = max-scale = %d) while %s serves: its %s rollout raises it stage by stage and restores the template's bounds when it ends",
		rev.Namespace, rev.Name, ref, firstPods, firstPods, stable, policy.Capacity.Strategy)}, true, nil
}

// workerDefaults stand in for the worker's, which the webhook does not know:
// the built-in ones, and a Prometheus. They decide only whether the policy
// parses, never the bounds — and a policy whose analysis checks query the
// worker's Prometheus (SLUICE_PROMETHEUS_URL, not the document's) parses on
// the worker, so it must here: without one, every capacity target with such
// checks was let through unbounded, its template's min-scale running beside
// the stable's from the first pod.
func workerDefaults() config.Defaults {
	d := config.BuiltinDefaults()
	d.PrometheusURL = "http://the-workers-prometheus.invalid"
	return d
}
