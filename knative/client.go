package knative

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/config"
)

// FieldManager names sluice in the managed fields of what it writes.
const FieldManager = "sluice"

// Client reads and writes the Knative objects a rollout works on. Its
// errors keep the API server's (apierrors.IsNotFound and the like see
// through them) and name the object.
type Client struct {
	Serving servingclient.Interface
	// Feed, if set, serves the waits on a Service's or Route's traffic
	// that it holds; the rest watch the API server.
	Feed Feed
}

// Errors about a target that no API call can fix.
var (
	// ErrNoRoute: a Configuration target does not name its Route.
	ErrNoRoute = errors.New(config.AnnotationRoute + " must name the Route its Revisions roll out on")
	// ErrUnknownKind: a target that is neither a Service nor a Configuration.
	ErrUnknownKind = errors.New("use " + KindService + " or " + KindConfiguration)
)

// NotFoundError is a read of an object that is not there; the API
// server's error is underneath (apierrors.IsNotFound sees it).
type NotFoundError struct {
	What string
	err  error
}

func (e *NotFoundError) Error() string { return e.What + " not found" }
func (e *NotFoundError) Unwrap() error { return e.err }

// readError names the object a failed read was of.
func readError(what string, err error) error {
	if apierrors.IsNotFound(err) {
		return &NotFoundError{What: what, err: err}
	}
	return fmt.Errorf("read %s: %w", what, err)
}

// Target is a rollout target as read from the API server.
type Target struct {
	Ref TargetRef
	// Object is the object whose traffic a rollout writes, and Live its
	// traffic; both are empty when the Route of a Configuration is
	// unnamed (ErrNoRoute).
	Object ObjectRef
	Live   Live
	// Configuration is the Configuration whose Revisions roll out.
	Configuration string
	// Annotations are the target's: its opt-in and policy.
	Annotations map[string]string
	// TemplateAnnotations are its Revision template's, where a policy is
	// sometimes written by mistake (read for warnings, never for policy).
	TemplateAnnotations map[string]string
	// ConfigGeneration is the Configuration's generation: the template its
	// newest Revision runs (0 when the Configuration is not there yet).
	ConfigGeneration int64
}

// OptedIn reports whether the target's annotations opt it in to sluice
// rollouts; an annotation sluice cannot read is an error.
func (t Target) OptedIn() (bool, error) { return config.OptedIn(t.Annotations) }

// Serves reports whether the target's traffic gives revision a share now.
func (t Target) Serves(revision string) bool {
	for _, tr := range t.Live.Spec {
		if tr.RevisionName == revision && Percent(tr) > 0 {
			return true
		}
	}
	return false
}

// ReadTarget reads a target, its Configuration and its traffic object. On
// ErrNoRoute the Target returned still holds the Configuration's
// annotations, so a caller can tell whether the target opted in at all.
func (c Client) ReadTarget(ctx context.Context, ref TargetRef) (Target, error) {
	t := Target{Ref: ref, Configuration: ref.Name}
	switch ref.Kind {
	case KindService:
		svc, err := c.Serving.ServingV1().Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return Target{}, readError("Service "+ref.Namespace+"/"+ref.Name, err)
		}
		t.Annotations, t.TemplateAnnotations = svc.Annotations, svc.Spec.Template.Annotations
		t.Object = ObjectRef{Namespace: ref.Namespace, Kind: KindService, Name: ref.Name}
		t.Live, _ = LiveOf(svc)
		cfg, err := c.Serving.ServingV1().Configurations(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			t.ConfigGeneration = cfg.Generation
		case !apierrors.IsNotFound(err):
			return Target{}, fmt.Errorf("read Configuration %s/%s: %w", ref.Namespace, ref.Name, err)
		}
	case KindConfiguration:
		cfg, err := c.Serving.ServingV1().Configurations(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return Target{}, readError("Configuration "+ref.Namespace+"/"+ref.Name, err)
		}
		t.Annotations, t.ConfigGeneration = cfg.Annotations, cfg.Generation
		t.TemplateAnnotations = cfg.Spec.Template.Annotations
		route := cfg.Annotations[config.AnnotationRoute]
		if route == "" {
			return t, fmt.Errorf("%s: %w", ref, ErrNoRoute)
		}
		t.Object = ObjectRef{Namespace: ref.Namespace, Kind: KindRoute, Name: route}
		r, err := c.Serving.ServingV1().Routes(ref.Namespace).Get(ctx, route, metav1.GetOptions{})
		if err != nil {
			return Target{}, readError("Route "+ref.Namespace+"/"+route+" (named by "+config.AnnotationRoute+")", err)
		}
		t.Live, _ = LiveOf(r)
	default:
		return Target{}, fmt.Errorf("unknown target kind %q: %w", ref.Kind, ErrUnknownKind)
	}
	return t, nil
}

// Revisions lists a Configuration's Revisions by name, with want among them
// (want "" for none). The list comes from the API server's watch cache
// (resourceVersion "0"): a label selector filters every Revision of the
// namespace, and read from etcd, as a list without a resourceVersion is,
// that cost grew with the namespace — at a mass deploy of 5,000 Services, a
// start's list read 10,000 Revisions from etcd and took seconds
// (docs/benchmarks.md, the fleet). The cache may be a moment behind: if
// want is missing from it, the list is read again from etcd.
func (c Client) Revisions(ctx context.Context, namespace, configuration, want string) (map[string]*servingv1.Revision, error) {
	out, err := c.listRevisions(ctx, namespace, configuration, "0")
	if err == nil && want != "" && out[want] == nil {
		out, err = c.listRevisions(ctx, namespace, configuration, "")
	}
	return out, err
}

func (c Client) listRevisions(ctx context.Context, namespace, configuration, resourceVersion string) (map[string]*servingv1.Revision, error) {
	sel := labels.SelectorFromSet(labels.Set{serving.ConfigurationLabelKey: configuration}).String()
	list, err := c.Serving.ServingV1().Revisions(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: resourceVersion})
	if err != nil {
		return nil, fmt.Errorf("list Revisions of Configuration %s/%s: %w", namespace, configuration, err)
	}
	out := make(map[string]*servingv1.Revision, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}
