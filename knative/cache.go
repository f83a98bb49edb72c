package knative

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
	listers "knative.dev/serving/pkg/client/listers/serving/v1"

	"github.com/sluicehq/sluice/config"
)

// TargetCache reads rollout targets from informers' caches of the Services,
// Configurations and Routes of the namespaces it serves, so that the
// receiver answers the many events about targets that did not opt in (and
// the updates Knative makes to every Revision) with no API call. A read the
// cache cannot answer for sure goes to the API server: a Configuration the
// cache has not seen at the template the Revision runs (the Revision is
// newer than the cache), an object not in it yet, or a Service whose opt-in
// the cache may not have seen (its Configuration, which Knative copies the
// Service's annotations to, opts in where the cached Service does not).
type TargetCache struct {
	Client Client
	// listers per namespace; "" holds every namespace.
	listers map[string]targetListers
	// feed follows Services and Routes for the rollouts waiting on them.
	feed *trafficFeed
}

type targetListers struct {
	services       listers.ServiceLister
	configurations listers.ConfigurationLister
	routes         *lazyRoutes
}

// lazyRoutes is a namespace's Route informer, started only once some
// Configuration there names a Route (config.AnnotationRoute): a cluster
// whose targets are all Services — the usual case — then decodes none of
// the many status writes Knative makes to every Route.
type lazyRoutes struct {
	once sync.Once
	// start registers the informer, starts it and returns it with its lister.
	start  func() (cache.SharedIndexInformer, listers.RouteLister)
	inf    cache.SharedIndexInformer
	lister listers.RouteLister
	// started is set by the first ensure; synced once the first list is in.
	started, synced atomic.Bool
}

// get is the namespace's Route lister, or false until its first list is in.
func (r *lazyRoutes) get() (listers.RouteLister, bool) {
	if r.synced.Load() {
		return r.lister, true
	}
	return nil, false
}

// ensure starts the informer the first time it is called, and reports
// whether its first list came before ctx ended.
func (r *lazyRoutes) ensure(ctx context.Context) bool {
	r.started.Store(true)
	r.once.Do(func() { r.inf, r.lister = r.start() })
	if !cache.WaitForCacheSync(ctx.Done(), r.inf.HasSynced) {
		return false
	}
	r.synced.Store(true)
	return true
}

// NewTargetCache starts the informers of the given namespaces (every
// namespace when none is given) and waits until their first lists are in.
// They run until ctx ends.
func NewTargetCache(ctx context.Context, c Client, namespaces []string) (*TargetCache, error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	tc := &TargetCache{Client: c, listers: map[string]targetListers{}, feed: newTrafficFeed()}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(c.Serving, 0, informers.WithNamespace(ns), informers.WithTransform(slim))
		v1 := f.Serving().V1()
		svc, cfg := v1.Services(), v1.Configurations()
		routes := &lazyRoutes{start: func() (cache.SharedIndexInformer, listers.RouteLister) {
			inf := v1.Routes().Informer()
			// Added before the informer starts: it cannot fail.
			_, _ = inf.AddEventHandler(tc.feed.handler(KindRoute))
			f.Start(ctx.Done())
			return inf, v1.Routes().Lister()
		}}
		tc.listers[ns] = targetListers{services: svc.Lister(), configurations: cfg.Lister(), routes: routes}
		synced = append(synced, svc.Informer().HasSynced, cfg.Informer().HasSynced)
		if _, err := svc.Informer().AddEventHandler(tc.feed.handler(KindService)); err != nil {
			return nil, fmt.Errorf("follow Knative Services: %w", err)
		}
		if _, err := cfg.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { startRoutesFor(ctx, obj, routes) },
			UpdateFunc: func(_, obj any) { startRoutesFor(ctx, obj, routes) },
		}); err != nil {
			return nil, fmt.Errorf("watch Knative Configurations for Route targets: %w", err)
		}
		f.Start(ctx.Done())
	}
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), synced...) {
		return nil, fmt.Errorf("list Knative Services and Configurations in %v: not done in 2m0s (check the API server and the rights to list and watch them)", namespaces)
	}
	// Route targets there already: their Routes are read from the cache
	// from the start (the handlers above start them too, a moment later).
	for ns, l := range tc.listers {
		cfgs, _ := l.configurations.List(labels.Everything())
		for _, c := range cfgs {
			if c.Annotations[config.AnnotationRoute] != "" {
				if !l.routes.ensure(wait) {
					return nil, fmt.Errorf("list Knative Routes in %q (Configuration %s names one): not done in 2m0s (check the rights to list and watch them)", ns, c.Name)
				}
				break
			}
		}
	}
	return tc, nil
}

// startRoutesFor starts the Route informer once a Configuration names a
// Route, in the background: the informer's handler must not wait. Until its
// first list is in, that target is read from the API server.
func startRoutesFor(ctx context.Context, obj any, routes *lazyRoutes) {
	if c, ok := obj.(*servingv1.Configuration); ok && c.Annotations[config.AnnotationRoute] != "" && routes.started.CompareAndSwap(false, true) {
		go routes.ensure(ctx)
	}
}

// slim keeps what a target read needs: no managed fields, no copy of the
// whole object in kubectl's last-applied annotation, and of the Revision
// template (a Service's or Configuration's largest part, which the cache
// would otherwise hold for every Service of the cluster) only the sluice
// annotations, a policy written in the wrong place.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *servingv1.Service:
		o.ManagedFields = nil
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		o.Spec.Template = slimTemplate(o.Spec.Template)
	case *servingv1.Configuration:
		o.ManagedFields = nil
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		o.Spec.Template = slimTemplate(o.Spec.Template)
	case *servingv1.Route:
		o.ManagedFields = nil
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	return obj, nil
}

func slimTemplate(t servingv1.RevisionTemplateSpec) servingv1.RevisionTemplateSpec {
	var kept map[string]string
	for k, v := range t.Annotations {
		if strings.HasPrefix(k, config.Prefix) {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	return servingv1.RevisionTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: kept}}
}

// ReadTarget reads the target of a Revision that runs template generation
// of its Configuration (0: unknown), as Client.ReadTarget does; cached
// reports whether the informers' caches answered it.
func (tc *TargetCache) ReadTarget(ctx context.Context, ref TargetRef, generation int64) (t Target, cached bool, err error) {
	if t, ok := tc.cached(ref, generation); ok {
		return t, true, nil
	}
	t, err = tc.Client.ReadTarget(ctx, ref)
	return t, false, err
}

// listersOf are the listers that hold namespace's objects.
func (tc *TargetCache) listersOf(namespace string) (targetListers, bool) {
	if l, ok := tc.listers[namespace]; ok {
		return l, true
	}
	l, ok := tc.listers[metav1.NamespaceAll]
	return l, ok
}

// Follow serves a watch of a Service's or Route's traffic from the
// informers (see Feed).
func (tc *TargetCache) Follow(o ObjectRef) (watch.Interface, bool) {
	l, ok := tc.listersOf(o.Namespace)
	if !ok {
		return nil, false
	}
	var current func() (runtime.Object, error)
	switch o.Kind {
	case KindService:
		current = func() (runtime.Object, error) { return l.services.Services(o.Namespace).Get(o.Name) }
	case KindRoute:
		rl, ok := l.routes.get()
		if !ok {
			return nil, false // Routes not followed (yet): the API server's watch
		}
		current = func() (runtime.Object, error) { return rl.Routes(o.Namespace).Get(o.Name) }
	default:
		return nil, false
	}
	return tc.feed.follow(feedKey{o.Kind, o.Namespace, o.Name}, func() (runtime.Object, bool) {
		obj, err := current()
		return obj, err == nil
	}), true
}

func (tc *TargetCache) cached(ref TargetRef, generation int64) (Target, bool) {
	l, ok := tc.listersOf(ref.Namespace)
	if !ok {
		return Target{}, false
	}
	cfg, err := l.configurations.Configurations(ref.Namespace).Get(ref.Name)
	if err != nil || generation <= 0 || cfg.Generation < generation {
		return Target{}, false
	}
	t := Target{Ref: ref, Configuration: ref.Name, ConfigGeneration: cfg.Generation}
	switch ref.Kind {
	case KindService:
		svc, err := l.services.Services(ref.Namespace).Get(ref.Name)
		if err != nil {
			return Target{}, false
		}
		byConfig, _ := config.OptedIn(cfg.Annotations)
		if byService, _ := config.OptedIn(svc.Annotations); byConfig && !byService {
			return Target{}, false
		}
		t.Annotations, t.TemplateAnnotations = svc.Annotations, svc.Spec.Template.Annotations
		t.Object = ObjectRef{Namespace: ref.Namespace, Kind: KindService, Name: ref.Name}
		t.Live, _ = LiveOf(svc)
	case KindConfiguration:
		route := cfg.Annotations[config.AnnotationRoute]
		if route == "" {
			return Target{}, false // the API read says why, as it always has
		}
		rl, ok := l.routes.get()
		if !ok {
			return Target{}, false // not followed yet: the API read
		}
		r, err := rl.Routes(ref.Namespace).Get(route)
		if err != nil {
			return Target{}, false
		}
		t.Annotations, t.TemplateAnnotations = cfg.Annotations, cfg.Spec.Template.Annotations
		t.Object = ObjectRef{Namespace: ref.Namespace, Kind: KindRoute, Name: route}
		t.Live, _ = LiveOf(r)
	default:
		return Target{}, false
	}
	return t, true
}

// Newest is a target's newest Revision, as the caches know them.
type Newest struct {
	Target   Target
	Revision string
}

// Newest lists, for every opted-in target the caches hold whole, the
// Revision its Configuration created last, sorted by target. A target the
// caches cannot answer for (see ReadTarget) is left out: its events are read
// from the API server as they come.
func (tc *TargetCache) Newest() []Newest {
	var out []Newest
	for _, l := range tc.listers {
		cfgs, err := l.configurations.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, cfg := range cfgs {
			rev := cfg.Status.LatestCreatedRevisionName
			if rev == "" {
				continue
			}
			ref := TargetOf(cfg.Namespace, RevisionLabels{Service: cfg.Labels[serving.ServiceLabelKey], Configuration: cfg.Name})
			t, ok := tc.cached(ref, cfg.Generation)
			if opted, _ := t.OptedIn(); ok && opted {
				out = append(out, Newest{Target: t, Revision: rev})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target.Ref.String() < out[j].Target.Ref.String() })
	return out
}
