package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
)

// The live traffic of a Service or Route, as a rollout follows it: where
// its targets route, what Knative serves, and changes made outside sluice.

// routed names the Revision each spec target routes to, from a status that
// has observed the spec: Knative lists the targets in spec order, with the
// Revision each latestRevision target resolved to.
func routed(spec, status []servingv1.TrafficTarget, current bool) []string {
	if !current || len(status) != len(spec) {
		return nil
	}
	out := make([]string, len(spec))
	for i := range spec {
		if spec[i].Tag == status[i].Tag && Percent(spec[i]) == Percent(status[i]) {
			out[i] = status[i].RevisionName
		}
	}
	return out
}

// ServedTraffic is an object's status.traffic: what Knative reports it
// serves, which may differ from what sluice wrote.
func ServedTraffic(ctx context.Context, serving servingclient.Interface, o ObjectRef) ([]servingv1.TrafficTarget, error) {
	a := &Activities{Serving: serving}
	live, err := a.readTraffic(ctx, o)
	if err != nil {
		return nil, err
	}
	return live.status, nil
}

// ReadTraffic reads an object's spec.traffic and where each target routes.
func (a *Activities) ReadTraffic(ctx context.Context, o ObjectRef) (LiveTraffic, error) {
	live, err := a.readTraffic(ctx, o)
	if err != nil {
		return LiveTraffic{}, err
	}
	return LiveTraffic{Spec: live.spec, Routed: routed(live.spec, live.status, live.observedGeneration == live.generation)}, nil
}

// AwaitTrafficChange answers once the object's spec.traffic is no longer
// in.Expected — someone else changed it — or the object is gone, watching
// it so the change is seen at once; or, if neither happens within in.For,
// with no change. It heartbeats while it watches.
func (a *Activities) AwaitTrafficChange(ctx context.Context, in AwaitTrafficInput) (TrafficChange, error) {
	live, err := a.readTraffic(ctx, in.Object)
	if err != nil {
		return TrafficChange{}, err
	}
	if !SameTraffic(live.spec, in.Expected) {
		return TrafficChange{Changed: true, Found: live.spec}, nil
	}
	defer keepAlive(ctx)()
	wctx, cancel := a.watchContext(ctx, in.For)
	defer cancel()
	var change TrafficChange
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			return a.watchObject(ctx, in.Object, rv)
		},
		read: func(ctx context.Context) (runtime.Object, error) { return a.readObject(ctx, in.Object) },
		done: func(typ watch.EventType, obj runtime.Object) bool {
			if typ == watch.Deleted {
				change = TrafficChange{Gone: true}
				return true
			}
			l, ok := liveFromObject(obj)
			if !ok || l.name != in.Object.Name || SameTraffic(l.spec, in.Expected) {
				return false
			}
			change = TrafficChange{Changed: true, Found: l.spec}
			return true
		},
	}
	w.until(wctx, live.resourceVersion)
	return change, nil
}

type liveTraffic struct {
	name               string
	spec, status       []servingv1.TrafficTarget
	resourceVersion    string
	generation         int64
	observedGeneration int64
	ready              bool
	notReady           string
}

func (a *Activities) readTraffic(ctx context.Context, o ObjectRef) (liveTraffic, error) {
	var (
		obj runtime.Object
		err error
	)
	switch o.Kind {
	case KindService:
		obj, err = a.Serving.ServingV1().Services(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	case KindRoute:
		obj, err = a.Serving.ServingV1().Routes(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	default:
		return liveTraffic{}, temporal.NewNonRetryableApplicationError("cannot write traffic to a "+o.Kind, ErrInvalidTraffic, nil)
	}
	if err != nil {
		return liveTraffic{}, readError(err, o.String())
	}
	live, _ := liveFromObject(obj)
	return live, nil
}

// liveFromObject reads the traffic of a Service or Route as sluice compares it.
func liveFromObject(obj runtime.Object) (liveTraffic, bool) {
	switch o := obj.(type) {
	case *servingv1.Service:
		lt := liveTraffic{name: o.Name, spec: serviceTraffic(o), status: o.Status.Traffic, resourceVersion: o.ResourceVersion,
			generation: o.Generation, observedGeneration: o.Status.ObservedGeneration}
		lt.ready, lt.notReady = conditionTrue(o.Status.GetCondition(servingv1.ServiceConditionRoutesReady), "RoutesReady")
		return lt, true
	case *servingv1.Route:
		lt := liveTraffic{name: o.Name, spec: o.Spec.Traffic, status: o.Status.Traffic, resourceVersion: o.ResourceVersion,
			generation: o.Generation, observedGeneration: o.Status.ObservedGeneration}
		lt.ready, lt.notReady = conditionTrue(o.Status.GetCondition(servingv1.RouteConditionAllTrafficAssigned), "AllTrafficAssigned")
		if lt.ready {
			lt.ready, lt.notReady = conditionTrue(o.Status.GetCondition(apis.ConditionReady), "Ready")
		}
		return lt, true
	}
	return liveTraffic{}, false
}

// serviceTraffic is a Service's spec.traffic as Knative reads it: a Service
// that gives none (created where Knative's defaulting webhook did not run)
// sends all traffic to its latest Ready Revision.
func serviceTraffic(svc *servingv1.Service) []servingv1.TrafficTarget {
	if len(svc.Spec.Traffic) > 0 {
		return svc.Spec.Traffic
	}
	latest, all := true, int64(100)
	return []servingv1.TrafficTarget{{LatestRevision: &latest, Percent: &all}}
}

func conditionTrue(c *apis.Condition, name string) (bool, string) {
	if c == nil {
		return false, name + " not reported yet"
	}
	if c.IsTrue() {
		return true, ""
	}
	return false, fmt.Sprintf("%s=%s %s %s", name, c.Status, c.Reason, c.Message)
}

func readError(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return temporal.NewNonRetryableApplicationError(what+" not found: it was deleted or never existed", ErrTargetNotFound, err)
	}
	return fmt.Errorf("read %s: %w", what, err)
}
