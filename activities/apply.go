package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
)

// setTraffic writes Desired as the object's traffic, carrying the
// resourceVersion it was computed from so a concurrent edit is a 409 rather
// than overwritten. It is idempotent: if Desired is already live it writes
// nothing. It also returns the object as it was last seen: the patch's
// answer, or the read that found Desired live already.
func (a *Activities) setTraffic(ctx context.Context, in SetTrafficInput) (SetTrafficResult, knative.Live, error) {
	if err := knative.ValidateTraffic(in.Object.Kind, in.Desired); err != nil {
		return SetTrafficResult{}, knative.Live{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refusing to write invalid traffic to %s: %v", in.Object, err), ErrInvalidTraffic, nil)
	}
	// The Revisions' readiness and the object are read at once: on a busy
	// API server each read is a round trip, and all of them stand between
	// the decision and the write.
	var live knative.Live
	var readErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		live, readErr = a.Knative.ReadTraffic(ctx, in.Object)
	}()
	notReady := a.checkRevisionsReady(ctx, in.Object.Namespace, in.Desired)
	wg.Wait()
	if notReady != nil {
		return SetTrafficResult{}, knative.Live{}, notReady
	}
	const attempts = 5
	for i := 0; i < attempts; i++ {
		if i > 0 {
			live, readErr = a.Knative.ReadTraffic(ctx, in.Object)
		}
		if readErr != nil {
			return SetTrafficResult{}, knative.Live{}, kubeError(readErr)
		}
		if knative.SameTraffic(live.Spec, in.Desired) {
			return SetTrafficResult{Generation: live.Generation}, live, nil
		}
		if !in.Force && !knative.SameTraffic(live.Spec, in.Expected) {
			return SetTrafficResult{}, knative.Live{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"traffic on %s was changed outside sluice: expected %s, found %s; resume to take the live traffic as the new starting point, or abort to roll back (a GitOps tool that re-applies spec.traffic from Git does this: see docs/gitops.md)",
				in.Object, knative.FormatTraffic(in.Expected), knative.FormatTraffic(live.Spec)), ErrDrift, nil)
		}
		written, err := a.Knative.PatchTraffic(ctx, in.Object, live, in.Desired)
		if apierrors.IsConflict(err) {
			// The spec changed since it was read: a template change is
			// routine; a traffic change shows as drift on the re-read.
			if activity.IsActivity(ctx) {
				activity.GetLogger(ctx).Info("traffic write conflicted, re-reading", "object", in.Object.String())
			}
			continue
		}
		if err != nil {
			return SetTrafficResult{}, knative.Live{}, writeError(ctx, err, in.Object)
		}
		return SetTrafficResult{Generation: written.Generation, Changed: true}, written, nil
	}
	return SetTrafficResult{}, knative.Live{}, fmt.Errorf("write traffic to %s: still conflicting after %d attempts", in.Object, attempts)
}

// checkRevisionsReady refuses a list that names a Revision that is not Ready:
// Knative would freeze the whole Route until it becomes Ready.
func (a *Activities) checkRevisionsReady(ctx context.Context, namespace string, traffic []servingv1.TrafficTarget) error {
	// Each Revision named is read once, all at once; the first one in the
	// list's order that is not Ready is the one reported.
	states := map[string]*revisionRead{}
	var wg sync.WaitGroup
	for _, t := range traffic {
		if t.RevisionName == "" || states[t.RevisionName] != nil {
			continue
		}
		r := &revisionRead{}
		states[t.RevisionName] = r
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			r.st, r.err = a.Knative.ReadRevision(ctx, knative.RevisionRef{Namespace: namespace, Name: name})
		}(t.RevisionName)
	}
	wg.Wait()
	for i, t := range traffic {
		if t.RevisionName == "" {
			continue
		}
		r := states[t.RevisionName]
		if r.err != nil {
			return r.err
		}
		if !r.st.Ready {
			why := "not found"
			if r.st.Found {
				why = "not Ready"
				if r.st.Message != "" {
					why += ": " + r.st.Message
				}
			}
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"refusing to write traffic: spec.traffic[%d] names Revision %s/%s, which is %s", i, namespace, t.RevisionName, why),
				ErrRevisionNotReady, nil, t.RevisionName)
		}
	}
	return nil
}

// revisionRead is one Revision's state as read for checkRevisionsReady.
type revisionRead struct {
	st  knative.RevisionState
	err error
}

// VerifyTraffic succeeds once the object's status shows Desired at the
// generation sluice wrote. It reads the object, and if the status does not
// show it yet, watches the object until it does — so it answers the moment
// Knative reports the traffic, without polling — or until the activity's
// time is nearly up, when it fails with a retryable error that says what is
// missing; the workflow's retry policy and timeout bound the wait.
func (a *Activities) VerifyTraffic(ctx context.Context, in VerifyInput) error {
	defer keepAlive(ctx)()
	live, err := a.Knative.ReadTraffic(ctx, in.Object)
	if err != nil {
		return kubeError(err)
	}
	return a.awaitVisible(ctx, in, live, 0)
}

// ApplyTraffic writes Desired as setTraffic does and then verifies it as
// VerifyTraffic does, for at most in.VerifyFor: one activity per step. If the
// status does not show the traffic in that time it still succeeds, with
// Visible false, and the workflow goes on verifying.
func (a *Activities) ApplyTraffic(ctx context.Context, in ApplyTrafficInput) (ApplyTrafficResult, error) {
	defer keepAlive(ctx)()
	start := time.Now()
	set, live, err := a.setTraffic(ctx, in.SetTrafficInput)
	if err != nil {
		return ApplyTrafficResult{}, err
	}
	// The patch's answer is where the watch starts: no second read.
	v := VerifyInput{Object: in.Object, Desired: in.Desired, Generation: set.Generation}
	lacks, edited := a.lacksAfterWatch(ctx, v, live, in.VerifyFor, true)
	if edited != nil {
		return ApplyTrafficResult{}, driftedError(v, edited)
	}
	if a.TrafficWrites != nil {
		a.TrafficWrites(time.Since(start), lacks == "")
	}
	return ApplyTrafficResult{SetTrafficResult: set, Visible: lacks == "", Lacks: lacks}, nil
}

// awaitVisible returns nil once the object's status shows the traffic, or,
// as a retryable error, what it still lacks (see lacksAfterWatch).
func (a *Activities) awaitVisible(ctx context.Context, in VerifyInput, live knative.Live, limit time.Duration) error {
	if lacks, _ := a.lacksAfterWatch(ctx, in, live, limit, false); lacks != "" {
		return temporal.NewApplicationError(lacks, ErrNotVisible)
	}
	return nil
}

// driftedError is the non-retryable drift of a write whose spec someone
// else changed while the write's own watch awaited its status: that status
// can never show what sluice wrote, so waiting out the verify timeout would
// only end in a rollback of someone's deliberate edit. The workflow pauses
// on it as on any drift. (The later rounds of VerifyTraffic do not stop on
// it: the workflow code that runs them rolls back on their errors, so they
// keep watching as they always did.)
func driftedError(in VerifyInput, edited []servingv1.TrafficTarget) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"traffic on %s was changed outside sluice while its write was verified: wrote %s, found %s; resume to take the live traffic as the new starting point, or abort to roll back (a GitOps tool that re-applies spec.traffic from Git does this: see docs/gitops.md)",
		in.Object, knative.FormatTraffic(in.Desired), knative.FormatTraffic(edited)), ErrDrift, nil)
}

// lacksAfterWatch is "" once the object's status shows the traffic — at
// once if live shows it, else by watching from live for at most limit (0:
// until shortly before the activity's deadline) — or else the last reason
// it did not. With drift, it ends at once if someone else changed the
// spec's traffic since sluice wrote it, and returns that traffic as edited.
func (a *Activities) lacksAfterWatch(ctx context.Context, in VerifyInput, live knative.Live, limit time.Duration, drift bool) (lacks string, edited []servingv1.TrafficTarget) {
	drifted := func(l knative.Live) bool {
		return drift && l.Generation > in.Generation && !knative.SameTraffic(l.Spec, in.Desired)
	}
	lacks = live.Lacks(in.Object, in.Desired, in.Generation)
	if lacks != "" && drifted(live) {
		return lacks, live.Spec
	}
	if lacks != "" {
		wctx, cancel := a.watchContext(ctx, limit)
		defer cancel()
		_, err := a.Knative.WatchTraffic(wctx, in.Object, live.ResourceVersion, func(l knative.Live, gone bool) bool {
			if gone {
				return false
			}
			if drifted(l) {
				edited = l.Spec
				return true
			}
			lacks = l.Lacks(in.Object, in.Desired, in.Generation)
			return lacks == ""
		})
		warnNoWatch(ctx, err)
	}
	return lacks, edited
}

// watchContext bounds a watch by limit (0: none) and by WatchLimit, and
// ends it when the worker is told to stop (see workerStopping).
func (a *Activities) watchContext(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	if a.WatchLimit > 0 && (limit == 0 || a.WatchLimit < limit) {
		limit = a.WatchLimit
	}
	wctx, cancel := watchContext(ctx, limit)
	if !activity.IsActivity(ctx) {
		return wctx, cancel
	}
	sctx, stop := context.WithCancelCause(wctx)
	go func() {
		select {
		case <-activity.GetWorkerStopChannel(ctx):
			stop(errWorkerStopping)
		case <-sctx.Done():
		}
	}()
	return sctx, func() { stop(nil); cancel() }
}

// errWorkerStopping ends a watch whose worker is told to stop (a rolling
// update, a scale-in): the activity fails at once, retryably, and Temporal
// gives it to a worker that stays — rather than the stopping worker holding
// it until its stop timeout, or answering with a state that merely is the
// last one it saw.
var errWorkerStopping = errors.New("the worker is stopping")

// workerStopping is the retryable error of an activity whose watch ended
// because its worker is stopping, or nil.
func workerStopping(wctx context.Context) error {
	if context.Cause(wctx) == errWorkerStopping {
		return temporal.NewApplicationError("the worker is stopping; another worker goes on with this wait", ErrWorkerStopping)
	}
	return nil
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

// writeError sorts a refused traffic write. sluice validated the list with
// Knative's rules before writing it, so a refusal that names no traffic
// field is about something else — the object's template against a cluster
// limit, RBAC, another admission webhook — which sluice cannot fix by
// rolling back (that write would be refused too).
func writeError(ctx context.Context, err error, o knative.ObjectRef) error {
	switch {
	case apierrors.IsNotFound(err):
		return temporal.NewNonRetryableApplicationError(o.String()+" was deleted during the rollout", ErrTargetNotFound, err)
	case passingDenial(ctx, err):
		return fmt.Errorf("write traffic to %s: %w", o, retryDenial(err))
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
