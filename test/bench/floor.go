package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	informers "knative.dev/serving/pkg/client/informers/externalversions"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
)

// floor rolls every Service out the plainest way client-go allows, with no
// durability, from the same starting point as sluice's: it deploys the
// second Revision (the template change, with the traffic pinned to the
// first, in one write), waits until the Revision is Ready, then per step
// reads the Service, patches its traffic (testing the generation it read,
// as sluice does), waits — on a watch, not by polling — until its status
// shows the traffic as sluice's check wants it, and sleeps the hold. Its steps thus run while Knative
// brings the new Revisions up, as sluice's do. The gaps between its patches
// are the best a step can do on this stack.
func floor(ctx context.Context, stk *stack.Stack, svcs []string, plan floorPlan) error {
	factory := informers.NewSharedInformerFactoryWithOptions(stk.Serving, 0, informers.WithNamespace(stack.Namespace))
	inf := factory.Serving().V1().Services()
	var mu sync.Mutex
	wake := map[string]chan struct{}{}
	for _, n := range svcs {
		wake[n] = make(chan struct{}, 1)
	}
	poke := func(obj any) {
		if svc, ok := obj.(*servingv1.Service); ok {
			mu.Lock()
			ch := wake[svc.Name]
			mu.Unlock()
			if ch != nil {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }}); err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	lister := inf.Lister().Services(stack.Namespace)

	client := stk.Serving.ServingV1().Services(stack.Namespace)
	errs := make(chan error, len(svcs))
	var wg sync.WaitGroup
	for _, name := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if plan.deployed != nil {
				plan.deployed.set(name, time.Now())
			}
			if err := deployAndAwait(ctx, client, plan.ready, name, plan.timeout); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			for i, w := range plan.weights {
				if err := floorStep(ctx, client, lister, wake[name], name, w); err != nil {
					errs <- fmt.Errorf("%s step %d: %w", name, i+1, err)
					return
				}
				if i < len(plan.weights)-1 {
					time.Sleep(plan.hold)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// floorPlan is what the floor loop does: its steps' weights and hold, where
// it learns that Revisions are Ready, how long it waits for them, and where
// it notes when it deployed each (nil: nowhere).
type floorPlan struct {
	weights  []int64
	hold     time.Duration
	ready    *readyLog
	deployed *readyLog
	timeout  time.Duration
}

// deployAndAwait changes the Service's template, its traffic pinned to the
// first Revision, and waits until the second is Ready.
func deployAndAwait(ctx context.Context, client servicesClient, ready *readyLog, name string, timeout time.Duration) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"image":%q}]}},"traffic":[{"revisionName":"%s-00001","percent":100}]}}`, imageV2, name)
	if _, err := client.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("deploy the second Revision: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		if _, ok := ready.get(name + "-00002"); ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s-00002 not Ready after %s", name, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type servicesClient interface {
	Get(context.Context, string, metav1.GetOptions) (*servingv1.Service, error)
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*servingv1.Service, error)
}

type servicesLister interface {
	Get(string) (*servingv1.Service, error)
}

func floorStep(ctx context.Context, client servicesClient, lister servicesLister, wake <-chan struct{}, name string, weight int64) error {
	desired := []servingv1.TrafficTarget{{RevisionName: name + "-00002", Percent: new(weight)}}
	if weight < 100 {
		desired = append([]servingv1.TrafficTarget{{RevisionName: name + "-00001", Percent: new(100 - weight)}}, desired...)
	}
	// The patch tests the generation it read, as sluice's does, so
	// Knative's status writes between the read and the patch do not make it
	// conflict; a spec changed meanwhile fails the test (422), and is read
	// again and retried, as a client-go loop retries a conflict.
	var out *servingv1.Service
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) }, func() error {
		svc, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/generation", "value": svc.Generation},
			{"op": "add", "path": "/spec/traffic", "value": desired},
		})
		out, err = client.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	// As long as sluice's own default verify timeout.
	wait := config.BuiltinDefaults().VerifyTimeout
	deadline := time.After(wait)
	// Done when sluice's own check passes: the status at the written
	// generation shows the traffic and the Service's RoutesReady is True.
	// (Knative puts the traffic in the status before the ingress serves it,
	// then sets RoutesReady; a loop that stopped at the first would verify
	// less than sluice does, and measure a shorter step.)
	ref := knative.ObjectRef{Namespace: stack.Namespace, Kind: knative.KindService, Name: name}
	for {
		if cur, err := lister.Get(name); err == nil {
			if live, _ := knative.LiveOf(cur); live.Lacks(ref, desired, out.Generation) == "" {
				return nil
			}
		}
		select {
		case <-wake:
		case <-deadline:
			return fmt.Errorf("status did not show %s within %s", knative.FormatTraffic(desired), wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
