package knative

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Live is the traffic of a Service or Route as last read: what its spec
// asks, what its status says Knative serves, and whether that status is
// current.
type Live struct {
	Name               string
	Annotations        map[string]string
	Spec, Status       []servingv1.TrafficTarget
	ResourceVersion    string
	Generation         int64
	ObservedGeneration int64
	// Ready is the object's traffic condition (a Service's RoutesReady, a
	// Route's AllTrafficAssigned and Ready); NotReady says why not.
	Ready    bool
	NotReady string
}

// Routed names the Revision each spec target routes to, from a status that
// has observed the spec: Knative lists the targets in spec order, with the
// Revision each latestRevision target resolved to. It is nil when the
// status is behind the spec.
func (l Live) Routed() []string {
	if l.ObservedGeneration != l.Generation || len(l.Status) != len(l.Spec) {
		return nil
	}
	out := make([]string, len(l.Spec))
	for i := range l.Spec {
		if l.Spec[i].Tag == l.Status[i].Tag && Percent(l.Spec[i]) == Percent(l.Status[i]) {
			out[i] = l.Status[i].RevisionName
		}
	}
	return out
}

// Lacks says what the object's status still lacks before it shows desired,
// written at generation; "" once it shows it.
func (l Live) Lacks(o ObjectRef, desired []servingv1.TrafficTarget, generation int64) string {
	switch {
	case l.Name != "" && l.Name != o.Name:
		return fmt.Sprintf("%s: not reported yet", o)
	case l.ObservedGeneration < generation || l.ObservedGeneration != l.Generation:
		return fmt.Sprintf("%s: status is at generation %d, waiting for %d", o, l.ObservedGeneration, l.Generation)
	case !l.Ready:
		return fmt.Sprintf("%s: traffic not ready: %s", o, l.NotReady)
	case !StatusShows(desired, l.Status):
		return fmt.Sprintf("%s: status shows %s, waiting for %s", o, FormatTraffic(l.Status), FormatTraffic(desired))
	}
	return ""
}

// ReadTraffic reads the traffic of a Service or Route.
func (c Client) ReadTraffic(ctx context.Context, o ObjectRef) (Live, error) {
	obj, err := c.readObject(ctx, o)
	if err != nil {
		return Live{}, err
	}
	live, _ := LiveOf(obj)
	return live, nil
}

// PatchTraffic writes traffic as the object's spec.traffic, if no one has
// changed the object's spec since it was read as from: a JSON patch whose
// first operation tests metadata.generation, which only a change of the
// spec moves. A resourceVersion would do as well for a concurrent edit, but
// Knative writes the object's status all the time — above all just as a new
// Revision becomes Ready, the moment of a rollout's first write — and each
// of those writes would make the patch conflict and cost a read and a write
// more. A changed spec comes back as a Conflict (409), as a stale
// resourceVersion does. An object read without a generation is written
// with a merge patch carrying its resourceVersion. Either patch replaces
// the list whole, which is what sluice means. It returns the object as
// written.
func (c Client) PatchTraffic(ctx context.Context, o ObjectRef, from Live, traffic []servingv1.TrafficTarget) (Live, error) {
	k, err := c.kind(o, "write traffic to")
	if err != nil {
		return Live{}, err
	}
	pt, patch := types.JSONPatchType, []byte(nil)
	if from.Generation > 0 {
		patch, err = json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/generation", "value": from.Generation},
			{"op": "add", "path": "/spec/traffic", "value": CloneTraffic(traffic)},
		})
	} else {
		pt = types.MergePatchType
		patch, err = json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": from.ResourceVersion},
			"spec":     map[string]any{"traffic": CloneTraffic(traffic)},
		})
	}
	if err != nil {
		return Live{}, fmt.Errorf("encode traffic patch: %w", err)
	}
	obj, err := k.patch(ctx, pt, patch)
	if err != nil && from.Generation > 0 && c.failedTest(ctx, k, from, err) {
		return Live{}, apierrors.NewConflict(servingv1.Resource(strings.ToLower(o.Kind)+"s"), o.Name,
			fmt.Errorf("its spec changed since generation %d was read", from.Generation))
	}
	if err != nil {
		return Live{}, err
	}
	live, _ := LiveOf(obj)
	return live, nil
}

// failedTest reports whether a patch was refused because its test of the
// generation failed. The API server answers a failed test 422 with a
// generic message and no details (the reason stays in its log); the fake
// clientset of unit tests returns the reason itself. A bare 422 is checked
// by reading the object: a failed test, if its spec has moved on since.
func (c Client) failedTest(ctx context.Context, k kindClient, from Live, err error) bool {
	if strings.Contains(err.Error(), "testing value /metadata/generation failed") {
		return true
	}
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || (st.Status().Details != nil && len(st.Status().Details.Causes) > 0) {
		return false
	}
	obj, rerr := k.get(ctx)
	if rerr != nil {
		return false
	}
	now, _ := LiveOf(obj)
	return now.Generation != from.Generation
}

// Annotate sets one annotation on a Service or Route.
func (c Client) Annotate(ctx context.Context, o ObjectRef, key, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return fmt.Errorf("encode annotation %s: %w", key, err)
	}
	k, err := c.kind(o, "annotate")
	if err != nil {
		return err
	}
	_, err = k.patch(ctx, types.MergePatchType, patch)
	if err != nil {
		return fmt.Errorf("annotate %s %s=%s: %w", o, key, value, err)
	}
	return nil
}

// WatchTraffic watches the object from resourceVersion until done, called
// with each state it is seen in (gone true once it is deleted), says
// enough. It reports whether done did before ctx ended; an error means the
// object cannot be watched at all (a missing watch right, most likely).
func (c Client) WatchTraffic(ctx context.Context, o ObjectRef, resourceVersion string, done func(l Live, gone bool) bool) (bool, error) {
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			if c.Feed != nil {
				if w, ok := c.Feed.Follow(o); ok {
					return w, nil
				}
			}
			k, err := c.kind(o, "watch")
			if err != nil {
				return nil, err
			}
			return k.watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", o.Name).String(), ResourceVersion: rv})
		},
		read: func(ctx context.Context) (runtime.Object, error) { return c.readObject(ctx, o) },
		done: func(typ watch.EventType, obj runtime.Object) bool {
			if typ == watch.Deleted {
				return done(Live{}, true)
			}
			l, ok := LiveOf(obj)
			return ok && l.Name == o.Name && done(l, false)
		},
	}
	return w.until(ctx, resourceVersion)
}

// readObject reads the Service or Route whose traffic sluice writes.
func (c Client) readObject(ctx context.Context, o ObjectRef) (runtime.Object, error) {
	k, err := c.kind(o, "read traffic of")
	if err != nil {
		return nil, err
	}
	obj, err := k.get(ctx)
	if err != nil {
		return nil, readError(o.String(), err)
	}
	return obj, nil
}

// kindClient is the typed client of one traffic object, reduced to what
// sluice does with it.
type kindClient struct {
	get   func(ctx context.Context) (runtime.Object, error)
	patch func(ctx context.Context, pt types.PatchType, patch []byte) (runtime.Object, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// kind is the one place sluice tells a Service from a Route: the client of
// o's kind, or ErrUnknownKind (what says what was being done).
func (c Client) kind(o ObjectRef, what string) (kindClient, error) {
	switch o.Kind {
	case KindService:
		return typed(c.Serving.ServingV1().Services(o.Namespace), o.Name), nil
	case KindRoute:
		return typed(c.Serving.ServingV1().Routes(o.Namespace), o.Name), nil
	}
	return kindClient{}, fmt.Errorf("%s a %s: %w", what, o.Kind, ErrUnknownKind)
}

// typedClient is what sluice uses of a generated clientset's Services or
// Routes client.
type typedClient[T runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// typed is the kindClient of the object name through tc; every patch is
// under sluice's field manager.
func typed[T runtime.Object](tc typedClient[T], name string) kindClient {
	return kindClient{
		get: func(ctx context.Context) (runtime.Object, error) { return tc.Get(ctx, name, metav1.GetOptions{}) },
		patch: func(ctx context.Context, pt types.PatchType, p []byte) (runtime.Object, error) {
			return tc.Patch(ctx, name, pt, p, metav1.PatchOptions{FieldManager: FieldManager})
		},
		watch: tc.Watch,
	}
}

// LiveOf reads the traffic of a Service or Route as sluice compares it;
// false for any other object.
func LiveOf(obj runtime.Object) (Live, bool) {
	switch o := obj.(type) {
	case *servingv1.Service:
		l := Live{Name: o.Name, Annotations: o.Annotations, Spec: DefaultTraffic(o.Spec.Traffic), Status: o.Status.Traffic, ResourceVersion: o.ResourceVersion,
			Generation: o.Generation, ObservedGeneration: o.Status.ObservedGeneration}
		l.Ready, l.NotReady = conditionTrue(o.Status.GetCondition(servingv1.ServiceConditionRoutesReady), "RoutesReady")
		return l, true
	case *servingv1.Route:
		l := Live{Name: o.Name, Annotations: o.Annotations, Spec: o.Spec.Traffic, Status: o.Status.Traffic, ResourceVersion: o.ResourceVersion,
			Generation: o.Generation, ObservedGeneration: o.Status.ObservedGeneration}
		l.Ready, l.NotReady = conditionTrue(o.Status.GetCondition(servingv1.RouteConditionAllTrafficAssigned), "AllTrafficAssigned")
		if l.Ready {
			l.Ready, l.NotReady = conditionTrue(o.Status.GetCondition(apis.ConditionReady), "Ready")
		}
		return l, true
	}
	return Live{}, false
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
