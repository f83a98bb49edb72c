package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
)

// Activities reads and writes Knative objects. The workflow refers to its
// methods through a nil *Activities; the worker registers a real one.
type Activities struct {
	Serving  servingclient.Interface
	Defaults config.Defaults
	// Events sends progress events; nil when no sink is configured.
	Events *events.Sender
	// WatchLimit bounds how long one activity watches an object's status
	// before it answers "not yet"; 0 means until shortly before its deadline.
	// Tests over a fake cluster, whose clock the workflow tests skip but a
	// watch cannot, set it short.
	WatchLimit time.Duration
	// Prometheus and Webhooks run analysis checks and hooks.
	Prometheus analysis.Prometheus
	Webhooks   analysis.Webhooks
}

// ResolveTarget reads the target's policy, its live traffic and its stable
// Revision. A target that is gone, not opted in or carries an invalid policy
// is a non-retryable error: retrying cannot fix it, the service owner can.
func (a *Activities) ResolveTarget(ctx context.Context, in ResolveInput) (Resolved, error) {
	t := in.Target
	var (
		annotations map[string]string
		res         Resolved
		status      []servingv1.TrafficTarget
		current     bool
	)
	switch t.Kind {
	case KindService:
		svc, err := a.Serving.ServingV1().Services(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return Resolved{}, readError(err, "Service "+t.Namespace+"/"+t.Name)
		}
		annotations = svc.Annotations
		res.Object = ObjectRef{Namespace: t.Namespace, Kind: KindService, Name: t.Name}
		res.Configuration = t.Name
		res.Traffic = serviceTraffic(svc)
		status, current = svc.Status.Traffic, svc.Status.ObservedGeneration == svc.Generation
	case KindConfiguration:
		cfg, err := a.Serving.ServingV1().Configurations(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return Resolved{}, readError(err, "Configuration "+t.Namespace+"/"+t.Name)
		}
		annotations = cfg.Annotations
		route := annotations[config.AnnotationRoute]
		if route == "" {
			return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"Configuration %s/%s: %s must name the Route its Revisions roll out on", t.Namespace, t.Name, config.AnnotationRoute),
				ErrInvalidPolicy, nil)
		}
		r, err := a.Serving.ServingV1().Routes(t.Namespace).Get(ctx, route, metav1.GetOptions{})
		if err != nil {
			return Resolved{}, readError(err, "Route "+t.Namespace+"/"+route+" (named by "+config.AnnotationRoute+")")
		}
		res.Object = ObjectRef{Namespace: t.Namespace, Kind: KindRoute, Name: route}
		res.Configuration = t.Name
		res.Traffic = r.Spec.Traffic
		status, current = r.Status.Traffic, r.Status.ObservedGeneration == r.Generation
	default:
		return Resolved{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("unknown target kind %q: use %s or %s", t.Kind, KindService, KindConfiguration), ErrInvalidPolicy, nil)
	}

	opted, err := config.OptedIn(annotations)
	if err != nil {
		return Resolved{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidPolicy, nil)
	}
	if !opted {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s is not opted in to sluice rollouts: set the annotation %s: enabled", t, config.AnnotationRollout), ErrNotOptedIn, nil)
	}
	res.Policy, err = config.FromAnnotations(annotations, a.Defaults)
	if err != nil {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: invalid rollout policy: %v", t, err), ErrInvalidPolicy, nil)
	}

	revs, err := a.revisionsOf(ctx, t.Namespace, res.Configuration)
	if err != nil {
		return Resolved{}, err
	}
	cand, ok := revs[in.Candidate]
	if !ok {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"Revision %s/%s not found among the Revisions of Configuration %s", t.Namespace, in.Candidate, res.Configuration), ErrTargetNotFound, nil)
	}
	res.CandidateGeneration = revisionGeneration(cand)
	res.Routed = routed(res.Traffic, status, current)
	res.Events = a.Events != nil
	res.Stable = stableRevision(res.Traffic, in.Candidate, revs)
	return res, nil
}

// stableRevision picks the Revision that serves the most traffic besides the
// candidate. A latestRevision target stands for the newest Ready Revision older
// than the candidate: reading the Route's status instead would race with
// Knative, which may already have moved it to the candidate.
func stableRevision(traffic []servingv1.TrafficTarget, candidate string, revs map[string]*servingv1.Revision) string {
	share := map[string]int64{}
	for _, t := range traffic {
		name := t.RevisionName
		if IsLatest(t) {
			name = newestReadyBefore(revs, candidate)
		}
		if name != "" && name != candidate {
			share[name] += Percent(t)
		}
	}
	best, bestShare := "", int64(-1)
	names := make([]string, 0, len(share))
	for n := range share {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if share[n] > bestShare {
			best, bestShare = n, share[n]
		}
	}
	if best == "" {
		best = newestReadyBefore(revs, candidate)
	}
	return best
}

func newestReadyBefore(revs map[string]*servingv1.Revision, candidate string) string {
	limit := int64(1<<62 - 1)
	if c, ok := revs[candidate]; ok {
		limit = revisionGeneration(c)
	}
	best, bestGen := "", int64(-1)
	for name, r := range revs {
		g := revisionGeneration(r)
		if name == candidate || g >= limit || !r.Status.GetCondition(apis.ConditionReady).IsTrue() {
			continue
		}
		if g > bestGen || (g == bestGen && name > best) {
			best, bestGen = name, g
		}
	}
	return best
}

func (a *Activities) revisionsOf(ctx context.Context, namespace, configuration string) (map[string]*servingv1.Revision, error) {
	sel := labels.SelectorFromSet(labels.Set{serving.ConfigurationLabelKey: configuration}).String()
	list, err := a.Serving.ServingV1().Revisions(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list Revisions of Configuration %s/%s: %w", namespace, configuration, err)
	}
	out := make(map[string]*servingv1.Revision, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

func revisionGeneration(r *servingv1.Revision) int64 {
	g, err := strconv.ParseInt(r.Labels[serving.ConfigurationGenerationLabelKey], 10, 64)
	if err != nil {
		return 0
	}
	return g
}

// ReadRevision reports a Revision's readiness. A missing Revision is reported,
// not returned as an error: the workflow decides what that means.
func (a *Activities) ReadRevision(ctx context.Context, ref RevisionRef) (RevisionState, error) {
	r, err := a.Serving.ServingV1().Revisions(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RevisionState{Name: ref.Name}, nil
	}
	if err != nil {
		return RevisionState{}, fmt.Errorf("read Revision %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return revisionState(r), nil
}

// AwaitRevision answers with the Revision's state once it is Ready, has
// failed, or is gone — watching it, so readiness is seen the moment Knative
// reports it — or, if none of that happens within in.For, with its state then.
func (a *Activities) AwaitRevision(ctx context.Context, in AwaitRevisionInput) (RevisionState, error) {
	revs := a.Serving.ServingV1().Revisions(in.Namespace)
	r, err := revs.Get(ctx, in.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RevisionState{Name: in.Name}, nil
	}
	if err != nil {
		return RevisionState{}, fmt.Errorf("read Revision %s/%s: %w", in.Namespace, in.Name, err)
	}
	st := revisionState(r)
	if st.Ready || st.Failed {
		return st, nil
	}
	wctx, cancel := a.watchContext(ctx, in.For)
	defer cancel()
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			return revs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", in.Name).String(), ResourceVersion: rv})
		},
		read: func(ctx context.Context) (runtime.Object, error) { return revs.Get(ctx, in.Name, metav1.GetOptions{}) },
		done: func(typ watch.EventType, obj runtime.Object) bool {
			if typ == watch.Deleted {
				st = RevisionState{Name: in.Name}
				return true
			}
			if rev, ok := obj.(*servingv1.Revision); ok && rev.Name == in.Name {
				st = revisionState(rev)
			}
			return st.Ready || st.Failed
		},
	}
	w.until(wctx, r.ResourceVersion)
	if (st.Ready || st.Failed || !st.Found) && in.Grace > 0 {
		// The event is on its way; if it is lost the answer comes late
		// by Grace, not never. The workflow stops waiting for this
		// activity as soon as the event arrives.
		gctx, cancel := a.watchContext(ctx, in.Grace)
		<-gctx.Done()
		cancel()
	}
	return st, nil
}

func revisionState(r *servingv1.Revision) RevisionState {
	st := RevisionState{Name: r.Name, Found: true, Generation: revisionGeneration(r)}
	if c := r.Status.GetCondition(apis.ConditionReady); c != nil {
		st.Ready = c.IsTrue() && r.Status.ObservedGeneration == r.Generation
		st.Failed = c.IsFalse()
		st.Reason, st.Message = c.Reason, c.Message
	}
	return st
}

// setTraffic writes Desired as the object's traffic with a JSON merge patch
// that carries the resourceVersion it was computed from, so a concurrent edit
// makes the API server answer 409 instead of being overwritten. It is
// idempotent: if Desired is already live it writes nothing. It also returns
// the object as it was last seen: the patch's answer, or the read that found
// Desired live already.
func (a *Activities) setTraffic(ctx context.Context, in SetTrafficInput) (SetTrafficResult, liveTraffic, error) {
	if err := ValidateTraffic(in.Object.Kind, in.Desired); err != nil {
		return SetTrafficResult{}, liveTraffic{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refusing to write invalid traffic to %s: %v", in.Object, err), ErrInvalidTraffic, nil)
	}
	if err := a.checkRevisionsReady(ctx, in.Object.Namespace, in.Desired); err != nil {
		return SetTrafficResult{}, liveTraffic{}, err
	}
	const attempts = 5
	for i := 0; i < attempts; i++ {
		live, err := a.readTraffic(ctx, in.Object)
		if err != nil {
			return SetTrafficResult{}, liveTraffic{}, err
		}
		if SameTraffic(live.spec, in.Desired) {
			return SetTrafficResult{Generation: live.generation}, live, nil
		}
		if !in.Force && !SameTraffic(live.spec, in.Expected) {
			return SetTrafficResult{}, liveTraffic{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"traffic on %s was changed outside sluice: expected %s, found %s; resume to take the live traffic as the new starting point, or abort to roll back",
				in.Object, FormatTraffic(in.Expected), FormatTraffic(live.spec)), ErrDrift, nil)
		}
		written, err := a.patchTraffic(ctx, in.Object, live.resourceVersion, in.Desired)
		if apierrors.IsConflict(err) {
			// Knative writes the object's status all the time: a stale
			// resourceVersion is routine, not drift.
			if activity.IsActivity(ctx) {
				activity.GetLogger(ctx).Info("traffic write conflicted, re-reading", "object", in.Object.String())
			}
			continue
		}
		if err != nil {
			return SetTrafficResult{}, liveTraffic{}, writeError(err, in.Object)
		}
		return SetTrafficResult{Generation: written.generation, Changed: true}, written, nil
	}
	return SetTrafficResult{}, liveTraffic{}, fmt.Errorf("write traffic to %s: still conflicting after %d attempts", in.Object, attempts)
}

// checkRevisionsReady refuses a list that names a Revision that is not Ready:
// Knative would freeze the whole Route until it becomes Ready.
func (a *Activities) checkRevisionsReady(ctx context.Context, namespace string, traffic []servingv1.TrafficTarget) error {
	for i, t := range traffic {
		if t.RevisionName == "" {
			continue
		}
		st, err := a.ReadRevision(ctx, RevisionRef{Namespace: namespace, Name: t.RevisionName})
		if err != nil {
			return err
		}
		if !st.Ready {
			why := "not found"
			if st.Found {
				why = "not Ready"
				if st.Message != "" {
					why += ": " + st.Message
				}
			}
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"refusing to write traffic: spec.traffic[%d] names Revision %s/%s, which is %s", i, namespace, t.RevisionName, why),
				ErrInvalidTraffic, nil)
		}
	}
	return nil
}

// VerifyTraffic succeeds once the object's status shows Desired at the
// generation sluice wrote. It reads the object, and if the status does not
// show it yet, watches the object until it does — so it answers the moment
// Knative reports the traffic, without polling — or until the activity's
// time is nearly up, when it fails with a retryable error that says what is
// missing; the workflow's retry policy and timeout bound the wait.
func (a *Activities) VerifyTraffic(ctx context.Context, in VerifyInput) error {
	live, err := a.readTraffic(ctx, in.Object)
	if err != nil {
		return err
	}
	return a.awaitVisible(ctx, in, live, 0)
}

// ApplyTraffic writes Desired as setTraffic does and then verifies it as
// VerifyTraffic does, for at most in.VerifyFor: one activity per step. If the
// status does not show the traffic in that time it still succeeds, with
// Visible false, and the workflow goes on verifying.
func (a *Activities) ApplyTraffic(ctx context.Context, in ApplyTrafficInput) (ApplyTrafficResult, error) {
	set, live, err := a.setTraffic(ctx, in.SetTrafficInput)
	if err != nil {
		return ApplyTrafficResult{}, err
	}
	// The patch's answer is where the watch starts: no second read.
	v := VerifyInput{Object: in.Object, Desired: in.Desired, Generation: set.Generation}
	return ApplyTrafficResult{SetTrafficResult: set, Visible: a.awaitVisible(ctx, v, live, in.VerifyFor) == nil}, nil
}

// awaitVisible returns nil once the object's status shows the traffic —
// at once if live shows it, else by watching from live for at most limit
// (0: until shortly before the activity's deadline) — or the last reason
// it did not.
func (a *Activities) awaitVisible(ctx context.Context, in VerifyInput, live liveTraffic, limit time.Duration) error {
	notYet := notVisible(in, live)
	if notYet == nil {
		return nil
	}
	wctx, cancel := a.watchContext(ctx, limit)
	defer cancel()
	return a.watchTraffic(wctx, in, live.resourceVersion, notYet)
}

// watchContext bounds a watch by limit (0: none) and by WatchLimit.
func (a *Activities) watchContext(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	if a.WatchLimit > 0 && (limit == 0 || a.WatchLimit < limit) {
		limit = a.WatchLimit
	}
	return watchContext(ctx, limit)
}

// watchContext ends a little before the activity's own deadline (so the
// activity answers rather than times out), and after limit if that is set.
func watchContext(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if ok {
		deadline = deadline.Add(-watchMargin)
	}
	if limit > 0 && (!ok || time.Now().Add(limit).Before(deadline)) {
		deadline, ok = time.Now().Add(limit), true
	}
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}

// watchMargin is how long before its deadline a verifying activity stops
// watching and answers.
const watchMargin = 250 * time.Millisecond

// watchTraffic watches the object from resourceVersion until its status shows
// the traffic (nil) or ctx ends (the last reason it did not).
func (a *Activities) watchTraffic(ctx context.Context, in VerifyInput, resourceVersion string, notYet error) error {
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			return a.watchObject(ctx, in.Object, rv)
		},
		read: func(ctx context.Context) (runtime.Object, error) { return a.readObject(ctx, in.Object) },
		done: func(_ watch.EventType, obj runtime.Object) bool {
			live, ok := liveFromObject(obj)
			if !ok {
				return false
			}
			notYet = notVisible(in, live)
			return notYet == nil
		},
	}
	if w.until(ctx, resourceVersion) {
		return nil
	}
	return notYet
}

// readObject reads the Service or Route whose traffic sluice writes.
func (a *Activities) readObject(ctx context.Context, o ObjectRef) (runtime.Object, error) {
	if o.Kind == KindRoute {
		return a.Serving.ServingV1().Routes(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	}
	return a.Serving.ServingV1().Services(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
}

func (a *Activities) watchObject(ctx context.Context, o ObjectRef, resourceVersion string) (watch.Interface, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", o.Name).String(), ResourceVersion: resourceVersion}
	if o.Kind == KindRoute {
		return a.Serving.ServingV1().Routes(o.Namespace).Watch(ctx, opts)
	}
	return a.Serving.ServingV1().Services(o.Namespace).Watch(ctx, opts)
}

// notVisible says what the object's status still lacks, as a retryable
// error, or nil once it shows the traffic.
func notVisible(in VerifyInput, live liveTraffic) error {
	switch {
	case live.name != "" && live.name != in.Object.Name:
		return temporal.NewApplicationError(fmt.Sprintf("%s: not reported yet", in.Object), ErrNotVisible)
	case live.observedGeneration < in.Generation || live.observedGeneration != live.generation:
		return temporal.NewApplicationError(fmt.Sprintf("%s: status is at generation %d, waiting for %d",
			in.Object, live.observedGeneration, live.generation), ErrNotVisible)
	case !live.ready:
		return temporal.NewApplicationError(fmt.Sprintf("%s: traffic not ready: %s", in.Object, live.notReady), ErrNotVisible)
	case !StatusShows(in.Desired, live.status):
		return temporal.NewApplicationError(fmt.Sprintf("%s: status shows %s, waiting for %s",
			in.Object, FormatTraffic(live.status), FormatTraffic(in.Desired)), ErrNotVisible)
	}
	return nil
}

type liveTraffic struct {
	name               string
	spec, status       []servingv1.TrafficTarget
	resourceVersion    string
	generation         int64
	observedGeneration int64
	ready              bool
	notReady           string
}

func (a *Activities) readTraffic(ctx context.Context, o ObjectRef) (liveTraffic, error) {
	var (
		obj runtime.Object
		err error
	)
	switch o.Kind {
	case KindService:
		obj, err = a.Serving.ServingV1().Services(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	case KindRoute:
		obj, err = a.Serving.ServingV1().Routes(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	default:
		return liveTraffic{}, temporal.NewNonRetryableApplicationError("cannot write traffic to a "+o.Kind, ErrInvalidTraffic, nil)
	}
	if err != nil {
		return liveTraffic{}, readError(err, o.String())
	}
	live, _ := liveFromObject(obj)
	return live, nil
}

// liveFromObject reads the traffic of a Service or Route as sluice compares it.
func liveFromObject(obj runtime.Object) (liveTraffic, bool) {
	switch o := obj.(type) {
	case *servingv1.Service:
		lt := liveTraffic{name: o.Name, spec: serviceTraffic(o), status: o.Status.Traffic, resourceVersion: o.ResourceVersion,
			generation: o.Generation, observedGeneration: o.Status.ObservedGeneration}
		lt.ready, lt.notReady = conditionTrue(o.Status.GetCondition(servingv1.ServiceConditionRoutesReady), "RoutesReady")
		return lt, true
	case *servingv1.Route:
		lt := liveTraffic{name: o.Name, spec: o.Spec.Traffic, status: o.Status.Traffic, resourceVersion: o.ResourceVersion,
			generation: o.Generation, observedGeneration: o.Status.ObservedGeneration}
		lt.ready, lt.notReady = conditionTrue(o.Status.GetCondition(servingv1.RouteConditionAllTrafficAssigned), "AllTrafficAssigned")
		if lt.ready {
			lt.ready, lt.notReady = conditionTrue(o.Status.GetCondition(apis.ConditionReady), "Ready")
		}
		return lt, true
	}
	return liveTraffic{}, false
}

// serviceTraffic is a Service's spec.traffic as Knative reads it: a Service
// that gives none (created where Knative's defaulting webhook did not run)
// sends all traffic to its latest Ready Revision.
func serviceTraffic(svc *servingv1.Service) []servingv1.TrafficTarget {
	if len(svc.Spec.Traffic) > 0 {
		return svc.Spec.Traffic
	}
	latest, all := true, int64(100)
	return []servingv1.TrafficTarget{{LatestRevision: &latest, Percent: &all}}
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

// patchTraffic sends a JSON merge patch. Custom resources do not support
// strategic merge patch on a real API server (415), and a merge patch replaces
// the traffic list whole, which is what sluice means.
func (a *Activities) patchTraffic(ctx context.Context, o ObjectRef, resourceVersion string, traffic []servingv1.TrafficTarget) (liveTraffic, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec":     map[string]any{"traffic": stripStatus(traffic)},
	})
	if err != nil {
		return liveTraffic{}, fmt.Errorf("encode traffic patch: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: "sluice"}
	var obj runtime.Object
	if o.Kind == KindService {
		obj, err = a.Serving.ServingV1().Services(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, opts)
	} else {
		obj, err = a.Serving.ServingV1().Routes(o.Namespace).Patch(ctx, o.Name, types.MergePatchType, patch, opts)
	}
	if err != nil {
		return liveTraffic{}, err
	}
	live, _ := liveFromObject(obj)
	return live, nil
}

// stripStatus drops the status-only URL so a list copied from status can be written to spec.
func stripStatus(traffic []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	out := make([]servingv1.TrafficTarget, len(traffic))
	for i, t := range traffic {
		t.URL = nil
		out[i] = t
	}
	return out
}

func readError(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return temporal.NewNonRetryableApplicationError(what+" not found: it was deleted or never existed", ErrTargetNotFound, err)
	}
	return fmt.Errorf("read %s: %w", what, err)
}

// writeError sorts a refused traffic write. sluice validated the list with
// Knative's rules before writing it, so a refusal that names no traffic
// field is about something else — the object's template against a cluster
// limit, RBAC, another admission webhook — which sluice cannot fix by
// rolling back (that write would be refused too).
func writeError(err error, o ObjectRef) error {
	switch {
	case apierrors.IsNotFound(err):
		return temporal.NewNonRetryableApplicationError(o.String()+" was deleted during the rollout", ErrTargetNotFound, err)
	case (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err)) && !refusesTraffic(err):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("the API server refused the traffic write to %s for a reason outside the traffic list: %v", o, err), ErrWriteRefused, err)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsUnsupportedMediaType(err):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("write traffic to %s: %v", o, err), ErrInvalidTraffic, err)
	}
	return fmt.Errorf("write traffic to %s: %w", o, err)
}

// refusesTraffic reports whether a refusal is about the traffic list: a
// field cause under spec.traffic, or — Knative's webhook answers with its
// field paths in the message — a message naming it.
func refusesTraffic(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil {
			for _, c := range d.Causes {
				if strings.HasPrefix(c.Field, "spec.traffic") {
					return true
				}
			}
		}
	}
	return strings.Contains(err.Error(), "spec.traffic") || strings.Contains(err.Error(), "status.traffic")
}

// EmitProgress sends one progress event. The event's ID comes from the
// workflow, so a retry after a lost acknowledgement repeats the same event.
func (a *Activities) EmitProgress(ctx context.Context, p events.Progress) error {
	if a.Events == nil {
		return nil
	}
	return a.Events.Send(ctx, p)
}

// TargetExists re-reads the object whose traffic a rollout writes. A delete
// event is only a hint: the rollout ends only if the object is really gone.
func (a *Activities) TargetExists(ctx context.Context, o ObjectRef) (bool, error) {
	_, err := a.readTraffic(ctx, o)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == ErrTargetNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
