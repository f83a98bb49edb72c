package mirror

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// StatusSource reads a rollout's status from its workflow; found is false
// when the target has no rollout Temporal still knows.
type StatusSource interface {
	RolloutStatus(ctx context.Context, t knative.TargetRef) (s api.Status, found bool, err error)
}

// Refresher rewrites Rollout resources from their workflows where no
// progress event would: a Rollout deleted by hand comes back, and a hold
// that ends at a gate shows as awaiting promotion.
type Refresher struct {
	Writer *Writer
	Source StatusSource
	// Cluster is the worker's cluster, part of its rollouts' workflow IDs.
	Cluster string
	// Commander carries out commands asked on the resources; nil refuses
	// them.
	Commander Commander
	Log       *slog.Logger

	mu       sync.Mutex
	timers   map[string]*time.Timer
	commands map[string]bool // namespace/name/id under way
}

// holdSlack is how long after a hold's end the workflow is read: time for
// its timer to fire and the next state to be decided.
const holdSlack = time.Second

// refreshTries bounds the reads after one hold's end that still find the
// rollout holding (its worker was down, or busy).
const refreshTries = 3

// Run watches the Rollout resources until ctx is done.
func (r *Refresher) Run(ctx context.Context) {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(r.Writer.Dynamic, 0)
	inf := factory.ForResource(GVR).Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { r.observe(ctx, obj) },
		DeleteFunc: func(obj any) { r.deleted(ctx, obj) },
	})
	if err != nil {
		r.Log.Error("cannot watch Rollout resources", "error", err)
		return
	}
	factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		store := inf.GetStore()
		r.Writer.cache.Store(&store)
		go r.resync(ctx, store.List())
	}
	<-ctx.Done()
	factory.Shutdown()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.timers {
		t.Stop()
	}
}

// resync rewrites every Rollout not ended from its workflow, once, as the
// worker starts: progress a worker stopped or killed before it wrote it
// shows now rather than at the rollout's next event.
func (r *Refresher) resync(ctx context.Context, objs []any) {
	for _, obj := range objs {
		if ro, ok := decode(obj); ok && !ro.Status.Ended && ctx.Err() == nil {
			_, _ = r.refresh(ctx, r.target(ro))
		}
	}
}

// observe carries out a command asked on the Rollout, and schedules a read
// of the workflow when the hold it shows ends at a gate.
func (r *Refresher) observe(ctx context.Context, obj any) {
	ro, ok := decode(obj)
	if !ok {
		return
	}
	key := ro.Namespace + "/" + ro.Name
	if pendingCommand(ro) {
		r.command(ctx, ro)
	} else {
		r.answeredCommand(ro)
	}
	if ro.Status.Ended || ro.Status.Paused || ro.Status.HoldUntil == nil || !ro.Status.GateAfterHold {
		// The rollout's next event tells of what follows: only a gate
		// waits in silence.
		r.schedule(key, nil)
		return
	}
	t := r.target(ro)
	r.schedule(key, time.AfterFunc(time.Until(ro.Status.HoldUntil.Time)+holdSlack, func() {
		for try := 1; ; try++ {
			v, err := r.refresh(ctx, t)
			if err != nil || try == refreshTries || v.Phase != api.PhaseHolding || time.Now().Before(v.HoldUntil) || ctx.Err() != nil {
				return
			}
			time.Sleep(time.Duration(try) * 5 * time.Second)
		}
	}))
}

// schedule replaces key's pending read with t (nil: none).
func (r *Refresher) schedule(key string, t *time.Timer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timers == nil {
		r.timers = map[string]*time.Timer{}
	}
	if old := r.timers[key]; old != nil {
		old.Stop()
	}
	if t == nil {
		delete(r.timers, key)
		return
	}
	r.timers[key] = t
}

// deleted rebuilds a deleted Rollout from its workflow; the write does
// nothing when its target is gone or going too.
func (r *Refresher) deleted(ctx context.Context, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	ro, ok := decode(obj)
	if !ok {
		return
	}
	r.schedule(ro.Namespace+"/"+ro.Name, nil)
	r.Writer.forget(ro.Namespace, ro.Name)
	go func() {
		if _, err := r.refresh(ctx, r.target(ro)); err == nil {
			r.Log.Info("Rollout resource deleted; rebuilt from its workflow", "rollout", ro.Namespace+"/"+ro.Name)
		}
	}()
}

// refresh writes t's Rollout from its workflow's status.
func (r *Refresher) refresh(ctx context.Context, t knative.TargetRef) (api.Status, error) {
	v, found, err := r.Source.RolloutStatus(ctx, t)
	if err != nil {
		r.Log.Warn("cannot read a rollout for its Rollout resource", "target", t.String(), "error", err)
		return v, err
	}
	if !found {
		return v, nil
	}
	if err := r.Writer.Rebuild(ctx, t, v); err != nil {
		r.Log.Warn("Rollout resource not written", "target", t.String(), "error", err)
		return v, err
	}
	return v, nil
}

func (r *Refresher) target(ro Rollout) knative.TargetRef {
	return knative.TargetRef{Cluster: r.Cluster, Namespace: ro.Namespace, Kind: ro.Spec.Target.Kind, Name: ro.Spec.Target.Name}
}

func decode(obj any) (Rollout, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return Rollout{}, false
	}
	var ro Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ro); err != nil || ro.Spec.Target.Name == "" {
		return Rollout{}, false
	}
	return ro, true
}
