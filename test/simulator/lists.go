package simulator

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	listers "knative.dev/serving/pkg/client/listers/serving/v1"
)

// lists is where a reconcile pass reads the namespace's objects: the API
// server (Reconcile called directly, as the unit tests do: every read is
// fresh) or informer caches (Run: reads are free, and may lag a write by a
// watch event, which then triggers another pass).
type lists interface {
	services(context.Context) ([]servingv1.Service, error)
	configurations(context.Context) ([]servingv1.Configuration, error)
	revisions(context.Context) ([]servingv1.Revision, error)
	routes(context.Context) ([]servingv1.Route, error)
}

func readAll(ctx context.Context, l lists) ([]servingv1.Service, []servingv1.Configuration, []servingv1.Route, []servingv1.Revision, error) {
	svcs, err := l.services(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cfgs, err := l.configurations(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	routes, err := l.routes(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	revs, err := l.revisions(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return svcs, cfgs, routes, revs, nil
}

// named is any Knative object.
type named interface{ GetName() string }

// byName indexes a list by object name; the pointers are into the list.
func byName[T any, P interface {
	*T
	named
}](items []T) map[string]P {
	out := make(map[string]P, len(items))
	for i := range items {
		p := P(&items[i])
		out[p.GetName()] = p
	}
	return out
}

type apiLists struct {
	c  servingclient.Interface
	ns string
}

func (a apiLists) services(ctx context.Context) ([]servingv1.Service, error) {
	l, err := a.c.ServingV1().Services(a.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Services: %w", err)
	}
	return l.Items, nil
}

func (a apiLists) configurations(ctx context.Context) ([]servingv1.Configuration, error) {
	l, err := a.c.ServingV1().Configurations(a.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Configurations: %w", err)
	}
	return l.Items, nil
}

func (a apiLists) revisions(ctx context.Context) ([]servingv1.Revision, error) {
	l, err := a.c.ServingV1().Revisions(a.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Revisions: %w", err)
	}
	return l.Items, nil
}

func (a apiLists) routes(ctx context.Context) ([]servingv1.Route, error) {
	l, err := a.c.ServingV1().Routes(a.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Routes: %w", err)
	}
	return l.Items, nil
}

// cacheLists copies out of the informers' caches: a pass mutates what it
// reads, and the caches must stay as the API server sent them.
type cacheLists struct {
	ns  string
	svc listers.ServiceLister
	cfg listers.ConfigurationLister
	rev listers.RevisionLister
	rt  listers.RouteLister
}

func (c cacheLists) services(context.Context) ([]servingv1.Service, error) {
	l, err := c.svc.Services(c.ns).List(labels.Everything())
	return copyAll(l), err
}

func (c cacheLists) configurations(context.Context) ([]servingv1.Configuration, error) {
	l, err := c.cfg.Configurations(c.ns).List(labels.Everything())
	return copyAll(l), err
}

func (c cacheLists) revisions(context.Context) ([]servingv1.Revision, error) {
	l, err := c.rev.Revisions(c.ns).List(labels.Everything())
	return copyAll(l), err
}

func (c cacheLists) routes(context.Context) ([]servingv1.Route, error) {
	l, err := c.rt.Routes(c.ns).List(labels.Everything())
	return copyAll(l), err
}

func copyAll[T any, P interface {
	*T
	DeepCopy() P
}](in []P) []T {
	out := make([]T, len(in))
	for i, p := range in {
		out[i] = *p.DeepCopy()
	}
	return out
}
