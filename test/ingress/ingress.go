// Package ingress is a test double of Knative's networking layer, for
// sluice's local stack: it plays the ingress controller (Kourier, Istio,
// Contour...) that a cluster runs beside Knative Serving, and nothing more.
// For every KIngress of its class it writes the status a real ingress
// writes once it has programmed the routes — NetworkConfigured and
// LoadBalancerReady, at the KIngress's generation — so Knative's Route
// reconciler, which waits for that, goes on as in a cluster. Its steady
// load is sent to the pods by test/requestsim itself; a test's own request
// goes through Router, which routes by the KIngress as an ingress would.
//
// Pause makes one KIngress stand still, as an ingress that stopped
// programming would: Knative then reports the Route's IngressReady Unknown
// (IngressNotConfigured) while its status traffic already shows the new
// split.
package ingress

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"knative.dev/networking/pkg/apis/networking"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	netinformers "knative.dev/networking/pkg/client/informers/externalversions"
)

// LoadBalancer is the address the stand-in reports for every KIngress.
const LoadBalancer = "ingress.sluice-stack.svc.cluster.local"

// Controller marks KIngress objects of Class ready.
type Controller struct {
	Client netclient.Interface
	Class  string
	Log    *slog.Logger

	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	lister func(types.NamespacedName) (*netv1alpha1.Ingress, error)

	mu     sync.Mutex
	paused map[types.NamespacedName]bool
}

// Run reconciles until ctx ends; it returns once its cache has synced and
// its workers run, with a channel closed when they have stopped.
func (c *Controller) Run(ctx context.Context, workers int) (<-chan struct{}, error) {
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](50*time.Millisecond, 5*time.Second))
	factory := netinformers.NewSharedInformerFactory(c.Client, 10*time.Minute)
	inf := factory.Networking().V1alpha1().Ingresses()
	enqueue := func(obj any) {
		if ing, ok := obj.(*netv1alpha1.Ingress); ok {
			c.queue.Add(types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name})
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	c.lister = func(k types.NamespacedName) (*netv1alpha1.Ingress, error) {
		return inf.Lister().Ingresses(k.Namespace).Get(k.Name)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil, fmt.Errorf("the KIngress cache did not sync")
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

// Pause stops (or, with false, resumes) programming the KIngress of the
// Route namespace/name: its status stays at the last generation it saw.
func (c *Controller) Pause(namespace, name string, paused bool) {
	k := types.NamespacedName{Namespace: namespace, Name: name}
	c.mu.Lock()
	if c.paused == nil {
		c.paused = map[types.NamespacedName]bool{}
	}
	c.paused[k] = paused
	c.mu.Unlock()
	if !paused && c.queue != nil {
		c.queue.Add(k)
	}
}

func (c *Controller) next(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	if err := c.reconcile(ctx, k); err != nil {
		c.Log.Debug("ingress stand-in: retry", "ingress", k, "err", err)
		c.queue.AddRateLimited(k)
		return true
	}
	c.queue.Forget(k)
	return true
}

func (c *Controller) reconcile(ctx context.Context, k types.NamespacedName) error {
	c.mu.Lock()
	paused := c.paused[k]
	c.mu.Unlock()
	ing, err := c.lister(k)
	if apierrors.IsNotFound(err) || paused {
		return nil
	}
	if err != nil {
		return err
	}
	if ing.GetAnnotations()[networking.IngressClassAnnotationKey] != c.Class || ing.IsReady() {
		return nil
	}
	ing = ing.DeepCopy()
	ing.Status.InitializeConditions()
	ing.Status.MarkNetworkConfigured()
	lb := []netv1alpha1.LoadBalancerIngressStatus{{DomainInternal: LoadBalancer}}
	ing.Status.MarkLoadBalancerReady(lb, lb)
	ing.Status.ObservedGeneration = ing.Generation
	_, err = c.Client.NetworkingV1alpha1().Ingresses(k.Namespace).UpdateStatus(ctx, ing, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A newer generation is on its way through the cache, or it is gone.
		return nil
	}
	return err
}
