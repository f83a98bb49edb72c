// Package knative holds what sluice knows about Knative Serving's objects
// beyond what Knative's own packages provide.
package knative

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
)

// RevisionLabels is what a Revision's labels say about it: its owners and
// which template of its Configuration it runs.
type RevisionLabels struct {
	Configuration string
	// Service is empty for a Revision of a Configuration on its own.
	Service string
	// Generation is the Configuration generation the Revision was created
	// from (0 if the label is missing): the order of a Configuration's
	// Revisions.
	Generation int64
}

// ReadRevisionLabels reads the labels Knative puts on a Revision.
func ReadRevisionLabels(labels map[string]string) RevisionLabels {
	g, err := strconv.ParseInt(labels[serving.ConfigurationGenerationLabelKey], 10, 64)
	if err != nil {
		g = 0
	}
	return RevisionLabels{
		Configuration: labels[serving.ConfigurationLabelKey],
		Service:       labels[serving.ServiceLabelKey],
		Generation:    g,
	}
}

// RevisionState is a Revision's readiness as last read.
type RevisionState struct {
	Name       string `json:"name"`
	Found      bool   `json:"found"`
	Ready      bool   `json:"ready"`
	Failed     bool   `json:"failed"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	Generation int64  `json:"generation"`
	// Pods and Wanted are the Revision's Ready and desired pods as Knative
	// reports them (status.actualReplicas and desiredReplicas); Bounds its
	// scale bounds.
	Pods   int32       `json:"pods,omitempty"`
	Wanted int32       `json:"wanted,omitempty"`
	Bounds ScaleBounds `json:"bounds,omitzero"`
	// Reserve is Knative's routing state "reserve": no route names the
	// Revision, so its autoscaler ignores its min-scale.
	Reserve bool `json:"reserve,omitempty"`
}

// Readiness is a Revision's readiness in one word: what its event shows,
// carried unchanged from the event that told it to the rollout's signal.
type Readiness string

const (
	// RevisionPending: not Ready yet, nor failed (or not known).
	RevisionPending Readiness = ""
	RevisionReady   Readiness = "Ready"
	RevisionFailed  Readiness = "Failed"
	RevisionDeleted Readiness = "Deleted"
)

// String is the word for a message: pending, ready, failed or deleted.
func (r Readiness) String() string {
	if r == RevisionPending {
		return "pending"
	}
	return strings.ToLower(string(r))
}

// Readiness is the state in one word.
func (s RevisionState) Readiness() Readiness {
	switch {
	case !s.Found:
		return RevisionDeleted
	case s.Ready:
		return RevisionReady
	case s.Failed:
		return RevisionFailed
	}
	return RevisionPending
}

// StateOf reads a Revision's readiness with Knative's own lifecycle helpers.
func StateOf(r *servingv1.Revision) RevisionState {
	st := RevisionState{Name: r.Name, Found: true, Generation: ReadRevisionLabels(r.Labels).Generation, Ready: r.IsReady(), Failed: r.IsFailed()}
	if c := r.Status.GetCondition(apis.ConditionReady); c != nil {
		st.Reason, st.Message = c.Reason, c.Message
	}
	if n := r.Status.ActualReplicas; n != nil {
		st.Pods = *n
	}
	if n := r.Status.DesiredReplicas; n != nil {
		st.Wanted = *n
	}
	st.Bounds = BoundsOf(r)
	st.Reserve = r.GetRoutingState() == servingv1.RoutingStateReserve
	return st
}

// ReadRevision reports a Revision's readiness. A missing Revision is a
// state (Found false), not an error.
func (c Client) ReadRevision(ctx context.Context, ref RevisionRef) (RevisionState, error) {
	r, err := c.Serving.ServingV1().Revisions(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RevisionState{Name: ref.Name}, nil
	}
	if err != nil {
		return RevisionState{}, fmt.Errorf("read Revision %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return StateOf(r), nil
}

// GetRevision reads a Revision whole.
func (c Client) GetRevision(ctx context.Context, ref RevisionRef) (*servingv1.Revision, error) {
	r, err := c.Serving.ServingV1().Revisions(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, readError("Revision "+ref.Namespace+"/"+ref.Name, err)
	}
	return r, nil
}

// AwaitRevision answers with the Revision's state once it is Ready, has
// failed or is gone — watching it, so that is seen the moment Knative
// reports it — or with its state when ctx ends. The error is a failed read,
// or a watch that could not be opened (with the state as first read).
func (c Client) AwaitRevision(ctx context.Context, ref RevisionRef) (RevisionState, error) {
	return c.awaitState(ctx, ref, func(st RevisionState) bool { return st.Ready || st.Failed })
}

// awaitState reads a Revision and watches it until done says enough of its
// state (a Revision that is gone always is: Found false), or ctx ends. A
// Revision that is not there at first is that state, not an error.
func (c Client) awaitState(ctx context.Context, ref RevisionRef, done func(RevisionState) bool) (RevisionState, error) {
	revs := c.Serving.ServingV1().Revisions(ref.Namespace)
	r, err := revs.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RevisionState{Name: ref.Name}, nil
	}
	if err != nil {
		return RevisionState{}, fmt.Errorf("read Revision %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	st := StateOf(r)
	if done(st) {
		return st, nil
	}
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			return revs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", ref.Name).String(), ResourceVersion: rv})
		},
		read: func(ctx context.Context) (runtime.Object, error) { return revs.Get(ctx, ref.Name, metav1.GetOptions{}) },
		done: func(typ watch.EventType, obj runtime.Object) bool {
			if typ == watch.Deleted {
				st = RevisionState{Name: ref.Name}
				return true
			}
			if rev, ok := obj.(*servingv1.Revision); ok && rev.Name == ref.Name {
				st = StateOf(rev)
			}
			return done(st)
		},
	}
	_, err = w.until(ctx, r.ResourceVersion)
	return st, err
}

// SameTemplate reports whether two Revisions run the same thing: the same
// containers (by name) with the same images, environment and resources.
// It is what makes a new Revision a revert of an older one; labels,
// annotations and scale bounds may differ. When both name a release
// (sluice.dev/release) the names decide, as they do for wave plans.
func SameTemplate(a, b *servingv1.Revision) bool {
	if ra, rb := a.Annotations[config.AnnotationRelease], b.Annotations[config.AnnotationRelease]; ra != "" && rb != "" {
		return ra == rb
	}
	ca, cb := a.Spec.Containers, b.Spec.Containers
	if len(ca) != len(cb) {
		return false
	}
	byName := make(map[string]corev1.Container, len(cb))
	for _, c := range cb {
		byName[c.Name] = c
	}
	for _, c := range ca {
		o, ok := byName[c.Name]
		if !ok || c.Image != o.Image ||
			!equality.Semantic.DeepEqual(c.Env, o.Env) ||
			!equality.Semantic.DeepEqual(c.EnvFrom, o.EnvFrom) ||
			!equality.Semantic.DeepEqual(c.Resources, o.Resources) {
			return false
		}
	}
	return true
}
