package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/measure"
	"github.com/sluicehq/sluice/mirror"
	"github.com/sluicehq/sluice/notify"
	"github.com/sluicehq/sluice/templates"
)

// Activities reads and writes Knative objects. The workflow refers to its
// methods through a nil *Activities; the worker registers a real one.
type Activities struct {
	Knative  knative.Client
	Defaults config.Defaults
	// Events sends progress events; nil when no sink is configured.
	Events *events.Sender
	// WatchLimit bounds how long one activity watches an object's status
	// before it answers "not yet"; 0 means until shortly before its deadline.
	// Tests over a fake cluster, whose clock the workflow tests skip but a
	// watch cannot, set it short.
	WatchLimit time.Duration
	// Prometheus and Webhooks run analysis checks and hooks.
	// Measure takes the measurements of analysis.
	Measure measure.Measurer
	// Cluster is the cluster this worker's Knative client reaches (empty
	// when only one cluster uses the Temporal namespace).
	Cluster string
	// Temporal joins rollouts to their wave (JoinWave).
	Temporal client.Client
	// Mirror shows progress on Rollout resources and as Kubernetes events;
	// nil when the cluster does not serve the Rollout resource.
	Mirror *mirror.Writer
	// Notify queues progress for notifications (Slack, Teams, webhooks);
	// nil sends none.
	Notify *notify.Notifier
	// Templates reads the shared analysis templates targets name; nil
	// refuses a target that names one.
	Templates templates.Source
	// TrafficWrites, if set, is told how long each ApplyTraffic took and
	// whether Knative's status showed the traffic in that time.
	TrafficWrites func(d time.Duration, visible bool)
}

// progress reports whether a rollout's progress goes anywhere: to an
// event sink, its Rollout resource, or notifications.
func (a *Activities) progress() bool {
	return a.Events != nil || (a.Mirror != nil && a.Mirror.Served()) || (a.Notify != nil && a.Notify.Configured())
}

// ResolveTarget reads the target's policy, its live traffic and its stable
// Revision. A target that is gone, not opted in or carries an invalid policy
// is a non-retryable error: retrying cannot fix it, the service owner can.
func (a *Activities) ResolveTarget(ctx context.Context, in ResolveInput) (Resolved, error) {
	t := in.Target
	if t.Cluster != a.Cluster {
		// Started on another cluster's task queue: acting on this cluster's
		// object of the same name would roll out the wrong Service.
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"the rollout of %s names cluster %q, but this worker serves cluster %q; start it on that cluster's task queue (%s)",
			t, t.Cluster, a.Cluster, api.ClusterTaskQueue(t.Cluster)), ErrWrongCluster, nil)
	}
	target, err := a.Knative.ReadTarget(ctx, t)
	switch {
	case errors.Is(err, knative.ErrNoRoute), errors.Is(err, knative.ErrUnknownKind):
		return Resolved{}, a.refuse(err.Error(), ErrInvalidPolicy, knative.ObjectRef{})
	case err != nil:
		return Resolved{}, kubeError(err)
	}
	opted, err := target.OptedIn()
	if err != nil {
		return Resolved{}, a.refuse(err.Error(), ErrInvalidPolicy, target.Object)
	}
	if !opted {
		// Its progress goes to the event sink only: a target that is not
		// opted in gets no Rollout resource.
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s is not opted in to sluice rollouts: set the annotation %s: enabled", t, config.AnnotationRollout), ErrNotOptedIn, nil,
			Refusal{Events: a.Events != nil})
	}
	policy, err := config.FromAnnotations(target.Annotations, a.Defaults)
	if err != nil {
		return Resolved{}, a.refuse(fmt.Sprintf("%s: invalid rollout policy: %v; fix it, then `sluice retry %s` rolls %s out",
			t, err, t.Name, in.Candidate), ErrInvalidPolicy, target.Object)
	}
	if ref := policy.AnalysisTemplate; ref != nil {
		if err := a.applyTemplate(ctx, t, &policy, target.Object); err != nil {
			return Resolved{}, err
		}
	}
	revs, err := a.Knative.Revisions(ctx, t.Namespace, target.Configuration, in.Candidate)
	if err != nil {
		return Resolved{}, err
	}
	history := config.ParseStableHistory(target.Live.Annotations[config.AnnotationStableHistory])
	candidate, stable := in.Candidate, ""
	if in.Undo {
		candidate, stable, err = undoTo(t, target, in.Candidate, history, revs)
		if err != nil {
			return Resolved{}, err
		}
	}
	cand, ok := revs[candidate]
	if !ok {
		return Resolved{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"Revision %s/%s not found among the Revisions of Configuration %s", t.Namespace, candidate, target.Configuration), ErrTargetNotFound, nil)
	}
	if stable == "" {
		stable = knative.Stable(target.Live.Spec, candidate, revs)
	}
	res := Resolved{
		Object:              target.Object,
		Configuration:       target.Configuration,
		Policy:              policy,
		Traffic:             target.Live.Spec,
		Routed:              target.Live.Routed(),
		Stable:              stable,
		CandidateGeneration: knative.ReadRevisionLabels(cand.Labels).Generation,
		Events:              a.progress(),
		CandidateBounds:     knative.TemplateBounds(cand),
		Release:             ReleaseOf(cand),
	}
	if stable, ok := revs[res.Stable]; ok {
		// Never fewer than its template's minimum: a stable short of it — a
		// pod being replaced, a previous rollout's bounds just given back, a
		// count Knative has not reported yet — returns to it during the
		// rollout, and a plan from the shortfall would count those pods
		// against the candidate's surge.
		res.StableBounds = knative.TemplateBounds(stable)
		res.StablePods = max(knative.StateOf(stable).Pods, res.StableBounds.MinPods())
	}
	if in.Undo && in.Candidate == "" {
		res.Candidate = candidate
	}
	res.CandidateReady = cand.IsReady()
	if !in.Undo && policy.RollbackWindow > 0 && res.Stable != "" {
		res.Revert = revertOf(cand, res.Stable, history, revs, time.Now().Add(-policy.RollbackWindow))
	}
	return res, nil
}

// Refusal is the detail of a rollout ResolveTarget refuses (an invalid
// policy, a target not opted in): whether progress events go out, so the
// rollout's end is told where its other events would be, and the object to
// mark ended (empty when there is none, or no mark is wanted), so the
// candidate's later events do not start the same refusal again.
type Refusal struct {
	Events bool              `json:"events"`
	Mark   knative.ObjectRef `json:"mark,omitempty"`
}

// refuse is the non-retryable error of a target whose policy the service
// owner must fix, with the Refusal as its detail.
func (a *Activities) refuse(msg, errType string, mark knative.ObjectRef) error {
	return temporal.NewNonRetryableApplicationError(msg, errType, nil, Refusal{Events: a.progress(), Mark: mark})
}

// EmitProgress sends one progress event, and shows it on the target's
// Rollout resource and among its Kubernetes events. The event's ID comes
// from the workflow, so a retry after a lost acknowledgement repeats the
// same event, and the same resource write.
func (a *Activities) EmitProgress(ctx context.Context, p events.Progress) error {
	if a.Mirror != nil {
		// Written beside the rollout, at the mirror's own pace.
		a.Mirror.Enqueue(p)
	}
	if a.Notify != nil {
		a.Notify.Progress(p)
	}
	if a.Events == nil {
		return nil
	}
	return a.Events.Send(ctx, p)
}

// TargetExists re-reads the object whose traffic a rollout writes. A delete
// event is only a hint: the rollout ends only if the object is really gone.
func (a *Activities) TargetExists(ctx context.Context, o knative.ObjectRef) (bool, error) {
	_, err := a.Knative.ReadTraffic(ctx, o)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, kubeError(err)
	}
	return true, nil
}

// kubeError makes a failed read of a target that is gone non-retryable: the
// rollout ends on it. Other failures are retried.
func kubeError(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return temporal.NewNonRetryableApplicationError(err.Error()+": it was deleted or never existed", ErrTargetNotFound, err)
	case errors.Is(err, knative.ErrUnknownKind):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidTraffic, err)
	}
	return err
}

// HeartbeatEvery is how often activities that wait (watches, queries,
// webhook calls) tell Temporal they are alive, after their first beat; the
// workflow gives them a heartbeat timeout of ten times that, so one cut
// short by a lost worker is retried within 20 s, not after its whole
// start-to-close timeout.
const HeartbeatEvery = 2 * time.Second

// keepAlive heartbeats until the returned stop is called: first after
// firstBeat, then every HeartbeatEvery.
func keepAlive(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		first := time.NewTimer(firstBeat(activity.GetInfo(ctx).HeartbeatTimeout))
		defer first.Stop()
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-first.C:
			activity.RecordHeartbeat(ctx)
		}
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// firstBeat is half the activity's heartbeat timeout (HeartbeatEvery if it
// has none that long): a beat is a call Temporal records, and most waits —
// a write's status, a short hold — end well within the timeout, so beating
// at once would cost a call each for nothing. After the first, the SDK
// sends at most one beat every 0.8 × the timeout however often keepAlive
// beats, so the later beats cost no more for starting late.
func firstBeat(heartbeatTimeout time.Duration) time.Duration {
	if heartbeatTimeout/2 <= HeartbeatEvery {
		return HeartbeatEvery
	}
	return heartbeatTimeout / 2
}
