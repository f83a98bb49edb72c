package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// FieldManager is the name sluice's writes of Rollout resources and events
// go under, in managedFields and the audit log.
const FieldManager = "sluice-worker"

// writeTimeout bounds one write, so a slow API server delays only the
// mirror, never the rollout's next progress event by much.
const writeTimeout = 5 * time.Second

// Event rate per target: a burst covers a whole rollout's events (started,
// each step, the end); beyond it, one every 10 seconds.
const (
	eventBurst = 25
	eventEvery = 10 * time.Second
)

// Writer writes Rollout resources and the Kubernetes events of a target.
type Writer struct {
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
	// Discovery tells whether the cluster serves the resource (Serve).
	Discovery discovery.DiscoveryInterface
	// UI is the Temporal UI's address and Namespace the Temporal namespace,
	// for each Rollout's link to its workflow; no link without UI.
	UI, Namespace string
	Log           *slog.Logger
	// Metrics, if set, counts the progress events written.
	Metrics *Metrics
	// Rate is how many writes a second the queue Enqueue fills is written
	// out at, at most; 0 means DefaultWriteRate.
	Rate int

	served atomic.Bool
	// cache, once the refresher's informer has synced, holds every Rollout:
	// a write reads the one it replaces from it rather than the API server.
	cache   atomic.Pointer[cache.Store]
	written sync.Map // namespace/name → *unstructured.Unstructured, as last written

	mu       sync.Mutex
	limiters map[types.UID]*rate.Limiter
	q        queue
}

// Served reports whether the cluster serves the Rollout resource, as far
// as Serve has found out; until it does, the writer writes nothing.
func (w *Writer) Served() bool { return w.served.Load() }

// Serve finds out whether the cluster serves the Rollout resource, asking
// again until it does (its CRD may be applied with, or after, the worker),
// then writes what Enqueue is given and runs refresh until ctx is done. It
// returns once what was still queued then is written (or flushTimeout has
// passed).
func (w *Writer) Serve(ctx context.Context, refresh func(context.Context)) {
	every, told := 2*time.Second, false
	for start := time.Now(); ; {
		list, err := w.Discovery.ServerResourcesForGroupVersion(Group + "/" + Version)
		if err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == Resource }) {
			w.served.Store(true)
			w.Log.Info("writing Rollout resources (rollouts.sluice.dev)")
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				w.drain(ctx)
			}()
			refresh(ctx)
			<-drained
			return
		}
		if !told && time.Since(start) > 10*time.Second {
			told, every = true, time.Minute
			w.Log.Info("the cluster does not serve Rollout resources (rollouts.sluice.dev): kubectl get rollouts shows nothing until its CRD is installed")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// Progress mirrors one progress event at once: the target's Rollout
// resource shows it, and the target gets a Kubernetes event for it. A
// failure is logged, never returned. The progress activity uses Enqueue.
func (w *Writer) Progress(ctx context.Context, p events.Progress) {
	if w.mirrors(p) {
		w.progress(ctx, []events.Progress{p}, nil)
	}
}

// Rebuild writes the Rollout resource from the workflow's own status.
func (w *Writer) Rebuild(ctx context.Context, t knative.TargetRef, v api.Status) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, err := w.write(ctx, t, func(prev Status) Status { return FromStatus(v, prev) })
	return err
}

// write brings t's Rollout to next(what it shows now), creating it if it
// is missing, unless it already shows a later state. It returns the
// target's UID ("" when the target is gone).
func (w *Writer) write(ctx context.Context, t knative.TargetRef, next func(Status) Status) (types.UID, error) {
	rollouts := w.Dynamic.Resource(GVR).Namespace(t.Namespace)
	for attempt := 0; ; attempt++ {
		obj, err := w.cached(t)
		if obj == nil || attempt > 0 {
			// Not cached yet, or the cached one was stale: ask.
			obj, err = rollouts.Get(ctx, t.Name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			obj, err = w.create(ctx, t)
			if obj == nil && err == nil {
				return "", nil
			}
		}
		if err != nil {
			return "", err
		}
		var r Rollout
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
			return "", fmt.Errorf("read Rollout %s/%s: %w", t.Namespace, t.Name, err)
		}
		uid := ownerUID(r)
		s := next(r.Status)
		if !s.newer(r.Status) {
			return uid, nil
		}
		if s.WorkflowID != "" && w.UI != "" {
			s.URL = fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimSuffix(w.UI, "/"),
				url.PathEscape(w.Namespace), url.PathEscape(s.WorkflowID))
		}
		s.Conditions, s.Command = r.Status.Conditions, r.Status.Command
		s.Finish(r.Generation)
		if reflect.DeepEqual(s, r.Status) {
			return uid, nil
		}
		st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
		if err != nil {
			return uid, err
		}
		obj.Object["status"] = st
		updated, err := rollouts.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && attempt < 3 {
			// Written, or deleted, meanwhile: decide again on what it
			// shows now.
			w.written.Delete(t.Namespace + "/" + t.Name)
			continue
		}
		if err != nil {
			return uid, fmt.Errorf("write the status of Rollout %s/%s: %w", t.Namespace, t.Name, err)
		}
		w.written.Store(t.Namespace+"/"+t.Name, updated)
		return uid, nil
	}
}

// cached is t's Rollout as this writer last wrote it or, failing that, as
// the informer holds it; nil if neither has it. The informer learns of a
// write only after it, so the next event of the same rollout would find it
// a version behind and pay for a conflict and a read.
func (w *Writer) cached(t knative.TargetRef) (*unstructured.Unstructured, error) {
	if u, ok := w.written.Load(t.Namespace + "/" + t.Name); ok {
		return u.(*unstructured.Unstructured).DeepCopy(), nil
	}
	store := w.cache.Load()
	if store == nil {
		return nil, nil
	}
	item, ok, err := (*store).GetByKey(t.Namespace + "/" + t.Name)
	if err != nil || !ok {
		return nil, err
	}
	u, ok := item.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	return u.DeepCopy(), nil
}

// create makes t's Rollout, owned by the target so it goes when the target
// goes. It returns nil and no error when the target itself is gone.
func (w *Writer) create(ctx context.Context, t knative.TargetRef) (*unstructured.Unstructured, error) {
	gvr := schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: strings.ToLower(t.Kind) + "s"}
	target, err := w.Dynamic.Resource(gvr).Namespace(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s for its Rollout's owner: %w", t, err)
	}
	if target.GetDeletionTimestamp() != nil {
		return nil, nil // the garbage collector would take it again
	}
	r := Rollout{
		TypeMeta: metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: t.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "sluice"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: target.GetAPIVersion(), Kind: target.GetKind(), Name: target.GetName(), UID: target.GetUID(),
			}}},
		Spec: Spec{Target: Target{APIVersion: target.GetAPIVersion(), Kind: target.GetKind(), Name: target.GetName()}},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&r)
	if err != nil {
		return nil, err
	}
	obj, err := w.Dynamic.Resource(GVR).Namespace(t.Namespace).Create(ctx, &unstructured.Unstructured{Object: u},
		metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return w.Dynamic.Resource(GVR).Namespace(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create Rollout %s/%s: %w", t.Namespace, t.Name, err)
	}
	return obj, nil
}

// ownerUID is the UID of the target that owns r.
func ownerUID(r Rollout) types.UID {
	for _, o := range r.OwnerReferences {
		if o.Kind == r.Spec.Target.Kind && o.Name == r.Spec.Target.Name {
			return o.UID
		}
	}
	return ""
}

// eventKinds is how each progress event shows among the target's
// Kubernetes events (a pause depends on who paused: eventKind); analysis
// rounds do not show.
var eventKinds = map[string][2]string{
	events.ProgressStarted:    {corev1.EventTypeNormal, "RolloutStarted"},
	events.ProgressStep:       {corev1.EventTypeNormal, "RolloutStep"},
	events.ProgressPromoted:   {corev1.EventTypeNormal, "Promoted"},
	events.ProgressResumed:    {corev1.EventTypeNormal, "Resumed"},
	events.ProgressSucceeded:  {corev1.EventTypeNormal, "RolloutSucceeded"},
	events.ProgressSuperseded: {corev1.EventTypeNormal, "Superseded"},
	events.ProgressRolledBack: {corev1.EventTypeWarning, "RolledBack"},
	events.ProgressAborted:    {corev1.EventTypeWarning, "Aborted"},
	events.ProgressFailed:     {corev1.EventTypeWarning, "RolloutFailed"},
}

// eventKind is a progress event's Kubernetes event type and reason; ""
// for those that do not show.
func eventKind(p events.Progress) (typ, reason string) {
	if p.Type != events.ProgressPaused {
		k := eventKinds[p.Type]
		return k[0], k[1]
	}
	switch by := p.Data.By; {
	case by == api.ByAnalysis:
		return corev1.EventTypeWarning, "PausedByAnalysis"
	case by == api.ByDrift:
		return corev1.EventTypeWarning, "Drift"
	case !bySluice(by):
		return corev1.EventTypeNormal, "Paused" // a person paused it
	}
	return corev1.EventTypeWarning, "Paused"
}

// event records p as a Kubernetes event on the target, once: its name
// derives from p's ID, so a retried activity finds it there.
func (w *Writer) event(ctx context.Context, t knative.TargetRef, uid types.UID, p events.Progress) error {
	typ, reason := eventKind(p)
	if typ == "" {
		return nil
	}
	if !w.allow(uid) {
		w.Log.Info("Kubernetes event dropped: too many for this target", "target", t.String(), "reason", reason)
		return nil
	}
	sum := sha256.Sum256([]byte(p.ID))
	d := p.Data
	msg := d.Candidate
	if p.Type == events.ProgressStarted && d.Stable != "" {
		msg = fmt.Sprintf("rolling out %s, stable %s", d.Candidate, d.Stable)
	}
	if d.Step > 0 && d.Phase != string(api.PhaseRollingBack) {
		msg = fmt.Sprintf("%s at %d%% (step %d/%d)", d.Candidate, d.Weight, d.Step, d.StepCount)
	}
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	if !bySluice(d.By) {
		msg += " (by " + d.By + ")"
	}
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	at := metav1.Time{Time: p.Time}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name + "." + hex.EncodeToString(sum[:8]), Namespace: t.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "serving.knative.dev/v1", Kind: t.Kind, Name: t.Name,
			Namespace: t.Namespace, UID: uid},
		Type: typ, Reason: reason, Message: msg, Count: 1, FirstTimestamp: at, LastTimestamp: at,
		Source:              corev1.EventSource{Component: "sluice"},
		ReportingController: "sluice.dev/worker", ReportingInstance: "sluice-worker",
	}
	_, err := w.Kube.CoreV1().Events(t.Namespace).Create(ctx, ev, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("create event %s: %w (the worker's RBAC needs create on events)", reason, err)
	}
	return err
}

// allow takes one event from the target's budget.
func (w *Writer) allow(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.limiters == nil {
		w.limiters = map[types.UID]*rate.Limiter{}
	}
	l, ok := w.limiters[uid]
	if !ok {
		l = rate.NewLimiter(rate.Every(eventEvery), eventBurst)
		w.limiters[uid] = l
	}
	return l.Allow()
}

// bySluice reports whether by names sluice itself rather than a person or
// program that sent a command.
func bySluice(by string) bool {
	return by == "" || by == api.BySluice || strings.HasPrefix(by, api.BySluice+" ")
}

// forget drops what the writer remembers of a Rollout that was deleted.
func (w *Writer) forget(namespace, name string) { w.written.Delete(namespace + "/" + name) }
