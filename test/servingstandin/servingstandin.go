// Package servingstandin is a stand-in for Knative Serving's controller, for
// sluice's fleet run only: thousands of Services on a 2-core machine are more
// than Knative's own controller, webhook and autoscaler can carry beside
// Temporal and sluice, and the fleet run measures sluice and Temporal, not
// Knative. It writes what Knative's reconcilers would write for a Service —
// its Configuration (Knative's own MakeConfiguration), a Revision per
// template (Knative's MakeRevision), each Ready at once, and the Service's
// status following spec.traffic, with the Route's readiness as Knative
// propagates it — through the real API server, so sluice reads, writes,
// watches and gets events exactly as on a cluster. What it does not do:
// pods, scaling, networking, defaulting or validation (no webhook runs), no
// delay between a write and its status, and no Route objects: a Service's
// rollout never reads its Route, and the Route's two writes a step would
// be two of every three the stand-in makes.
// Every test except the fleet run uses Knative's own controller.
package servingstandin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
	listers "knative.dev/serving/pkg/client/listers/serving/v1"
	cfgresources "knative.dev/serving/pkg/reconciler/configuration/resources"
	svcresources "knative.dev/serving/pkg/reconciler/service/resources"
)

// Controller reconciles the Services of one namespace.
type Controller struct {
	Client    servingclient.Interface
	Namespace string
	// OnReady, if set, is told when a Revision is made Ready.
	OnReady func(revision string, at time.Time)
	Log     *slog.Logger

	queue     workqueue.TypedRateLimitingInterface[string]
	services  listers.ServiceNamespaceLister
	configs   listers.ConfigurationNamespaceLister
	revisions listers.RevisionNamespaceLister
}

// Run reconciles until ctx ends; it returns once its caches have synced and
// its workers run, with a channel closed when they have stopped.
func (c *Controller) Run(ctx context.Context, workers int) (<-chan struct{}, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 2*time.Second))
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(c.Namespace))
	v1 := factory.Serving().V1()
	// A Service's own changes, and its children's (a status written under
	// a stale cache is redone once the cache catches up), all come back to
	// the Service: the children are named after it.
	enqueue := func(obj any) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return
		}
		name := m.GetName()
		if l := m.GetLabels()["serving.knative.dev/service"]; l != "" {
			name = l
		}
		c.queue.Add(name)
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }}
	synced := []cache.InformerSynced{}
	for _, inf := range []cache.SharedIndexInformer{v1.Services().Informer(), v1.Configurations().Informer(), v1.Revisions().Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
	}
	c.services = v1.Services().Lister().Services(c.Namespace)
	c.configs = v1.Configurations().Lister().Configurations(c.Namespace)
	c.revisions = v1.Revisions().Lister().Revisions(c.Namespace)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("the Knative stand-in's caches did not sync")
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
		wg.Wait()
		close(done)
	}()
	return done, nil
}

func (c *Controller) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	if err := c.reconcile(ctx, name); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
			c.Log.Warn("knative stand-in: retry", "service", name, "error", err)
		}
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// reconcile brings one Service's children and status up to its spec. A
// conflict (the cache is behind a write of this stand-in's own) is retried
// from the cache.
func (c *Controller) reconcile(ctx context.Context, name string) error {
	svc, err := c.services.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg, err := c.configuration(ctx, svc)
	if err != nil {
		return err
	}
	rev, err := c.revision(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg, err = c.configurationStatus(ctx, cfg, rev); err != nil {
		return err
	}
	route := routeStatus(svc, cfg)
	return c.serviceStatus(ctx, svc, cfg, route)
}

// configuration creates or updates the Service's Configuration, as
// Knative's Service reconciler does: its generation moves only with the
// template, which names the Revision.
func (c *Controller) configuration(ctx context.Context, svc *servingv1.Service) (*servingv1.Configuration, error) {
	client := c.Client.ServingV1().Configurations(c.Namespace)
	cfg, err := c.configs.Get(svc.Name)
	if apierrors.IsNotFound(err) {
		return client.Create(ctx, svcresources.MakeConfiguration(svc), metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	if equality.Semantic.DeepEqual(cfg.Spec, svc.Spec.ConfigurationSpec) {
		return cfg, nil
	}
	want := svcresources.MakeConfigurationFromExisting(svc, cfg)
	cfg = cfg.DeepCopy()
	cfg.Spec, cfg.Labels, cfg.Annotations = want.Spec, want.Labels, want.Annotations
	return client.Update(ctx, cfg, metav1.UpdateOptions{})
}

// revision creates the Configuration's current Revision and makes it
// Ready, as Knative's controller does once its pods are up.
func (c *Controller) revision(ctx context.Context, cfg *servingv1.Configuration) (*servingv1.Revision, error) {
	client := c.Client.ServingV1().Revisions(c.Namespace)
	made := cfgresources.MakeRevision(ctx, cfg, time.Now())
	rev, err := c.revisions.Get(made.Name)
	if apierrors.IsNotFound(err) {
		rev, err = client.Create(ctx, made, metav1.CreateOptions{})
	}
	if err != nil || rev.IsReady() {
		return rev, err
	}
	rev = rev.DeepCopy()
	rev.Status.InitializeConditions()
	rev.Status.MarkResourcesAvailableTrue()
	rev.Status.MarkContainerHealthyTrue()
	rev.Status.MarkActiveTrue()
	rev.Status.ObservedGeneration = rev.Generation
	one := int32(1)
	rev.Status.ActualReplicas, rev.Status.DesiredReplicas = &one, &one
	if rev, err = client.UpdateStatus(ctx, rev, metav1.UpdateOptions{}); err != nil {
		return nil, err
	}
	if c.OnReady != nil {
		c.OnReady(rev.Name, time.Now())
	}
	return rev, nil
}

func (c *Controller) configurationStatus(ctx context.Context, cfg *servingv1.Configuration, rev *servingv1.Revision) (*servingv1.Configuration, error) {
	want := cfg.DeepCopy()
	want.Status.InitializeConditions()
	want.Status.SetLatestCreatedRevisionName(rev.Name)
	want.Status.SetLatestReadyRevisionName(rev.Name)
	want.Status.ObservedGeneration = cfg.Generation
	if sameStatus(cfg.Status.Status, want.Status.Status) && cfg.Status.ConfigurationStatusFields == want.Status.ConfigurationStatusFields {
		return cfg, nil
	}
	return c.Client.ServingV1().Configurations(c.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
}

// routeStatus is the status Knative's Route reconciler would write for the
// Service's Route: the traffic as the spec says, with latestRevision
// resolved to the Configuration's latest Ready Revision, Ready as if an
// ingress had programmed it.
func routeStatus(svc *servingv1.Service, cfg *servingv1.Configuration) *servingv1.RouteStatus {
	rs := &servingv1.RouteStatus{}
	rs.InitializeConditions()
	rs.Traffic = resolve(svc.Spec.Traffic, cfg.Status.LatestReadyRevisionName)
	rs.MarkTrafficAssigned()
	rs.MarkTLSNotEnabled("the Knative stand-in serves no TLS")
	ready := netv1alpha1.IngressStatus{}
	ready.InitializeConditions()
	ready.MarkNetworkConfigured()
	ready.MarkLoadBalancerReady(nil, nil)
	rs.PropagateIngressStatus(ready)
	rs.URL = &apis.URL{Scheme: "http", Host: fmt.Sprintf("%s.%s.example.com", svc.Name, svc.Namespace)}
	return rs
}

// resolve is a Route's status traffic for its spec: Knative's defaulting
// webhook does not run here, so no traffic means all of it to the latest.
func resolve(spec []servingv1.TrafficTarget, latest string) []servingv1.TrafficTarget {
	if len(spec) == 0 {
		spec = []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}}
	}
	out := make([]servingv1.TrafficTarget, 0, len(spec))
	for _, t := range spec {
		t = *t.DeepCopy()
		if t.RevisionName == "" {
			t.RevisionName = latest
			t.LatestRevision = new(true)
		} else {
			t.LatestRevision = new(false)
		}
		t.ConfigurationName = ""
		out = append(out, t)
	}
	return out
}

func (c *Controller) serviceStatus(ctx context.Context, svc *servingv1.Service, cfg *servingv1.Configuration, route *servingv1.RouteStatus) error {
	want := svc.DeepCopy()
	want.Status.InitializeConditions()
	want.Status.PropagateConfigurationStatus(&cfg.Status)
	want.Status.PropagateRouteStatus(route)
	want.Status.ObservedGeneration = svc.Generation
	if sameStatus(svc.Status.Status, want.Status.Status) && equality.Semantic.DeepEqual(svc.Status.RouteStatusFields, want.Status.RouteStatusFields) &&
		svc.Status.ConfigurationStatusFields == want.Status.ConfigurationStatusFields {
		return nil
	}
	_, err := c.Client.ServingV1().Services(c.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
	return err
}

// sameStatus compares two statuses' generation and conditions, ignoring
// when each condition last changed (set anew by every Mark).
func sameStatus(a, b duckv1.Status) bool {
	if a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return true
}
