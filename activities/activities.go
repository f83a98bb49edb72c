package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// fieldManager names sluice in the managed fields of what it writes.
const fieldManager = "sluice"

// Activities reads and writes Knative objects. The workflow refers to its
// methods through a nil *Activities; the worker registers a real one.
type Activities struct {
	Serving  servingclient.Interface
	Defaults config.Defaults
	// Events sends progress events; nil when no sink is configured.
	Events *events.Sender
	// WatchLimit bounds how long one activity watches an object's status
	// before it answers "not yet"; 0 means until shortly before its deadline.
	// Tests over a fake cluster, whose clock the workflow tests skip but a
	// watch cannot, set it short.
	WatchLimit time.Duration
	// Prometheus and Webhooks run analysis checks and hooks.
	Prometheus analysis.Prometheus
	Webhooks   analysis.Webhooks
}

// ResolveTarget reads the target's policy, its live traffic and its stable
// Revision. A target that is gone, not opted in or carries an invalid policy
// is a non-retryable error: retrying cannot fix it, the service owner can.
func (a *Activities) ResolveTarget(ctx context.Context, in ResolveInput) (Resolved, error) {
	t := in.Target
	var (
		annotations map[string]string
		res         Resolved
		status      []servingv1.TrafficTarget
		current     bool
	)
	switch t.Kind {
	case KindService:
		svc, err := a.Serving.ServingV1().Services(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return Resolved{}, readError(err, "Service "+t.Namespace+"/"+t.Name)
		}
		annotations = svc.Annotations
		res.Object = ObjectRef{Namespace: t.Namespace, Kind: KindService, Name: t.Name}
		res.Configuration = t.Name
		res.Traffic = serviceTraffic(svc)
		status, current = svc.Status.Traffic, svc.Status.ObservedGeneration == svc.Generation
	case KindConfiguration:
		cfg, err := a.Serving.ServingV1().Configurations(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return Resolved{}, readError(err, "Configuration "+t.Namespace+"/"+t.Name)
		}
		annotations = cfg.Annotations
		route := annotations[config.AnnotationRoute]
		if route == "" {
			return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"Configuration %s/%s: %s must name the Route its Revisions roll out on", t.Namespace, t.Name, config.AnnotationRoute),
				ErrInvalidPolicy, nil)
		}
		r, err := a.Serving.ServingV1().Routes(t.Namespace).Get(ctx, route, metav1.GetOptions{})
		if err != nil {
			return Resolved{}, readError(err, "Route "+t.Namespace+"/"+route+" (named by "+config.AnnotationRoute+")")
		}
		res.Object = ObjectRef{Namespace: t.Namespace, Kind: KindRoute, Name: route}
		res.Configuration = t.Name
		res.Traffic = r.Spec.Traffic
		status, current = r.Status.Traffic, r.Status.ObservedGeneration == r.Generation
	default:
		return Resolved{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("unknown target kind %q: use %s or %s", t.Kind, KindService, KindConfiguration), ErrInvalidPolicy, nil)
	}

	opted, err := config.OptedIn(annotations)
	if err != nil {
		return Resolved{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidPolicy, nil)
	}
	if !opted {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s is not opted in to sluice rollouts: set the annotation %s: enabled", t, config.AnnotationRollout), ErrNotOptedIn, nil)
	}
	res.Policy, err = config.FromAnnotations(annotations, a.Defaults)
	if err != nil {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: invalid rollout policy: %v", t, err), ErrInvalidPolicy, nil)
	}

	revs, err := a.revisionsOf(ctx, t.Namespace, res.Configuration)
	if err != nil {
		return Resolved{}, err
	}
	cand, ok := revs[in.Candidate]
	if !ok {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"Revision %s/%s not found among the Revisions of Configuration %s", t.Namespace, in.Candidate, res.Configuration), ErrTargetNotFound, nil)
	}
	res.CandidateGeneration = revisionGeneration(cand)
	res.Routed = routed(res.Traffic, status, current)
	res.Events = a.Events != nil
	res.Stable = knative.Stable(res.Traffic, in.Candidate, revs)
	return res, nil
}

func (a *Activities) revisionsOf(ctx context.Context, namespace, configuration string) (map[string]*servingv1.Revision, error) {
	sel := labels.SelectorFromSet(labels.Set{serving.ConfigurationLabelKey: configuration}).String()
	list, err := a.Serving.ServingV1().Revisions(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list Revisions of Configuration %s/%s: %w", namespace, configuration, err)
	}
	out := make(map[string]*servingv1.Revision, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// EmitProgress sends one progress event. The event's ID comes from the
// workflow, so a retry after a lost acknowledgement repeats the same event.
func (a *Activities) EmitProgress(ctx context.Context, p events.Progress) error {
	if a.Events == nil {
		return nil
	}
	return a.Events.Send(ctx, p)
}

// TargetExists re-reads the object whose traffic a rollout writes. A delete
// event is only a hint: the rollout ends only if the object is really gone.
func (a *Activities) TargetExists(ctx context.Context, o ObjectRef) (bool, error) {
	_, err := a.readTraffic(ctx, o)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == ErrTargetNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
