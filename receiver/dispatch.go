package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.temporal.io/api/serviceerror"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

func (r *Receiver) dispatch(ctx context.Context, e cloudevents.Event, a events.Action, principal string) result {
	switch a.Kind {
	case events.KindRevision:
		return r.revision(ctx, a, principal, false)
	case events.KindDeleted:
		kind := knative.KindService
		if a.ObjectKind == "Configuration" {
			kind = knative.KindConfiguration
		}
		t := knative.TargetRef{Namespace: a.Namespace, Kind: kind, Name: a.Name}
		return r.hint(ctx, t, api.SignalTargetDeleted, api.ObjectHint{Kind: a.ObjectKind, Name: a.Name}, "target deleted")
	case events.KindCommand:
		return r.command(ctx, a, principal)
	}
	return reply(http.StatusOK, "ignored", "ignored: %s", a.Kind)
}

// revision handles a Revision event: it hints the running rollout of the
// Revision's target, or starts one if the Revision is a new candidate. With
// sync, the offer is made before it answers, whatever the Revision's state
// (the sweep's own offers: nothing would make them again).
func (r *Receiver) revision(ctx context.Context, a events.Action, principal string, sync bool) result {
	if a.NeedsRead {
		rev, err := r.Knative.GetRevision(ctx, knative.RevisionRef{Namespace: a.Namespace, Name: a.Name})
		if apierrors.IsNotFound(err) {
			return reply(http.StatusOK, "ignored", "ignored: Revision %s/%s no longer exists", a.Namespace, a.Name)
		}
		if err != nil {
			return kubeError(err)
		}
		a.SetRevision(rev)
		if a.Configuration == "" {
			return reply(http.StatusOK, "ignored", "ignored: Revision %s has no configuration label", a.Name)
		}
	}
	if a.Deleted && a.Configuration == "" {
		return reply(http.StatusOK, "ignored", "ignored: a deleted Revision is noticed by its rollout's own re-read")
	}
	// A Revision's status is written several times on its way to Ready;
	// its rollout needs to hear of each state once.
	told := "told:" + a.Namespace + "/" + a.Name + "/" + a.Ready.String()
	if r.Seen.Has(told) {
		return reply(http.StatusOK, "duplicate", "ignored: sluice already acted on %s/%s being %s", a.Namespace, a.Name, a.Ready)
	}
	t, cached, res, ok := r.optedInTarget(ctx, a)
	if !ok {
		return res
	}
	target := t.Ref
	offer := api.CandidateSignal{Revision: a.Name, Generation: a.Generation, State: a.Ready,
		Reason: a.ReadyReason, Message: a.ReadyMessage, By: principal}
	if a.Deleted {
		// Only a running rollout needs to hear of it; nothing starts.
		res := r.hint(ctx, target, api.SignalCandidate, offer, a.Name+" was deleted")
		if res.code == http.StatusAccepted {
			r.Seen.Add(told)
		}
		return res
	}
	if why := alreadyHandled(t, a); why != "" {
		r.Seen.Add(told)
		return reply(http.StatusOK, "ignored", "ignored: %s", why)
	}
	req := control.StartRequest{Target: target, Offer: offer, Reason: "Started by a " + a.ObjectKind + " event from " + principal + ".",
		Stable: knative.Stable(t.Live.Spec, a.Name, nil), Annotations: t.Annotations}
	if err := r.Gate.Err(); err != nil {
		return r.temporalError(err, "offer "+a.Name+" to the rollout of "+target.String())
	}
	offered := "offered:" + a.Namespace + "/" + a.Name
	switch {
	case sync:
	case r.Seen.Has(offered):
		return r.offerLater(req, told)
	case r.BackgroundStarts && cached:
		// Its later states queue behind this offer, in its target's lane.
		r.Seen.Add(offered)
		return r.offerNew(req, told)
	}
	if _, err := r.Control.Offer(ctx, req); err != nil {
		return r.temporalError(err, "offer "+a.Name+" to the rollout of "+target.String())
	}
	r.Seen.Add(told)
	r.Seen.Add(offered)
	r.Seen.Add(startedKey(req))
	return reply(http.StatusAccepted, "offered", "offered %s (%s) to the rollout of %s", a.Name, a.Ready, target)
}

// optedInTarget finds the rollout target of a Revision — its Service, or its
// Configuration in Route mode — and checks that it opted in. A Configuration
// that opted in without naming its Route is offered all the same: its
// rollout fails at once, with the reason, where the UI shows it.
// cached says the informers' caches answered (so the sweep sees the target).
func (r *Receiver) optedInTarget(ctx context.Context, a events.Action) (t knative.Target, cached bool, res result, ok bool) {
	ref := knative.TargetOf(a.Namespace, knative.RevisionLabels{Service: a.Service, Configuration: a.Configuration})
	t, cached, err := r.readTarget(ctx, ref, a.Generation)
	switch {
	case apierrors.IsNotFound(err):
		return t, cached, reply(http.StatusOK, "ignored", "ignored: %v", err), false
	case err != nil && !errors.Is(err, knative.ErrNoRoute):
		return t, cached, kubeError(err), false
	}
	opted, err := t.OptedIn()
	if err != nil || !opted {
		r.warned.warn(ctx, r.Log, t, ref.Kind)
	}
	if err != nil {
		return t, cached, reply(http.StatusOK, "ignored", "ignored: %s has an invalid annotation: %v", ref, err), false
	}
	if !opted {
		return t, cached, reply(http.StatusOK, "not-opted-in", "ignored: %s is not opted in (%s)", ref, config.AnnotationRollout), false
	}
	return t, cached, result{}, true
}

// readTarget reads a Revision's target from the informers' caches when the
// receiver has them, else from the API server; cached says which.
func (r *Receiver) readTarget(ctx context.Context, ref knative.TargetRef, generation int64) (knative.Target, bool, error) {
	if r.Targets == nil {
		r.Metrics.read("api")
		t, err := r.Knative.ReadTarget(ctx, ref)
		return t, false, err
	}
	t, cached, err := r.Targets.ReadTarget(ctx, ref, generation)
	from := "api"
	if cached {
		from = "cache"
	}
	r.Metrics.read(from)
	return t, cached, err
}

// alreadyHandled says why a Revision event needs no Temporal call.
// ApiServerSource sends every update of every Revision: Knative relabels one
// whose traffic changes. A Revision of an older template than its
// Configuration's, one that serves traffic already (including the candidate
// of a rollout under way, whose later states its rollout reads itself), or
// one a rollout rolled back or aborted (its traffic object's
// config.AnnotationEnded says so, which outlives Temporal's retention of the
// run) is left alone. Whether a Revision is newer than a running rollout's
// candidate, the rollout decides. "Newer" compares template generations: the
// Configuration's is bumped with the change that creates the Revision, while
// its status names the Revision only later.
func alreadyHandled(t knative.Target, a events.Action) string {
	if a.Generation > 0 && t.ConfigGeneration > a.Generation {
		return fmt.Sprintf("%s is not the newest Revision of %s (it runs template %d of %d)", a.Name, t.Ref, a.Generation, t.ConfigGeneration)
	}
	if t.Serves(a.Name) {
		return fmt.Sprintf("%s already serves traffic on %s", a.Name, t.Ref)
	}
	if outcome := config.EndedOutcome(t.Live.Annotations[config.AnnotationEnded], a.Name); outcome != "" {
		return fmt.Sprintf("the rollout of %s on %s ended %s (annotation %s on %s); `sluice start` rolls it out again",
			a.Name, t.Ref, outcome, config.AnnotationEnded, t.Object)
	}
	return ""
}

// hint signals the running rollout of a target; no running rollout means
// there is nothing to tell.
func (r *Receiver) hint(ctx context.Context, t knative.TargetRef, signal string, payload any, what string) result {
	if err := r.Gate.Err(); err != nil {
		return r.temporalError(err, what)
	}
	err := r.Control.Tell(ctx, t, signal, payload)
	var nf *serviceerror.NotFound
	switch {
	case err == nil:
		return reply(http.StatusAccepted, "signalled", "told the rollout of %s: %s", t, what)
	case errors.As(err, &nf):
		return reply(http.StatusOK, "ignored", "ignored: no rollout is running for %s", t)
	}
	return r.temporalError(err, what)
}

// command runs a dev.sluice.rollout.* command through the same update
// validators the CLI uses.
func (r *Receiver) command(ctx context.Context, a events.Action, principal string) result {
	cmd := a.Command
	target, err := control.ParseTarget(cmd.Namespace, cmd.Target)
	if err != nil {
		return reply(http.StatusBadRequest, "invalid", "data.target: %v", err)
	}
	if err := r.Gate.Err(); err != nil {
		return r.temporalError(err, cmd.Name+" the rollout of "+target.String())
	}
	ctl := *r.Control
	ctl.Identity = principal
	if cmd.Requester != "" {
		ctl.Identity = cmd.Requester + " (via " + principal + ")"
	}
	if cmd.Wave {
		return r.waveCommand(ctx, &ctl, target, cmd)
	}
	if cmd.Name == "request" {
		if _, err := ctl.Start(ctx, target, cmd.Revision, cmd.Reason); err != nil {
			return r.temporalError(err, "start a rollout of "+cmd.Revision+" on "+target.String())
		}
		return reply(http.StatusAccepted, "started", "rollout of %s on %s requested", cmd.Revision, target)
	}
	if cmd.Name == api.CommandUndo {
		u, err := ctl.Undo(ctx, target, cmd.Revision, cmd.Reason)
		return r.undoResult(u, err, target)
	}
	msg, err := ctl.Send(ctx, target, cmd.Name, cmd.Reason)
	var rejected *control.RejectedError
	switch {
	case err == nil:
		return reply(http.StatusOK, "applied", "%s", msg)
	case errors.As(err, &rejected):
		return reply(http.StatusConflict, "rejected", "%s", rejected.Reason)
	case errors.Is(err, control.ErrNoRollout):
		return reply(http.StatusNotFound, "no-rollout", "%v", err)
	}
	return r.temporalError(err, cmd.Name+" the rollout of "+target.String())
}

// undoResult answers a dev.sluice.rollout.undo: accepted once the undo
// has started (or the running rollout took it as an abort); its end shows
// in progress events like a rollout's.
func (r *Receiver) undoResult(u control.UndoStarted, err error, target knative.TargetRef) result {
	var rejected *control.RejectedError
	switch {
	case err == nil && u.Aborted:
		return reply(http.StatusOK, "applied", "a rollout was running, so undo aborted it: %s", u.Message)
	case err == nil:
		return reply(http.StatusAccepted, "started", "undo started (run %s)", u.RunID)
	case errors.As(err, &rejected):
		return reply(http.StatusConflict, "rejected", "%s", rejected.Reason)
	}
	return r.temporalError(err, "undo on "+target.String())
}

// waveCommand sends a dev.sluice.wave.* command to the target's wave.
func (r *Receiver) waveCommand(ctx context.Context, ctl *control.Client, target knative.TargetRef, cmd *events.CommandData) result {
	id, err := ctl.WaveID(ctx, target, cmd.Release)
	if errors.Is(err, control.ErrNoRollout) {
		return reply(http.StatusNotFound, "no-wave", "%v", err)
	}
	if err == nil {
		err = ctl.WaveCommand(ctx, id, cmd.Name, cmd.Reason)
	}
	if err != nil {
		return r.temporalError(err, cmd.Name+" the wave of "+target.String())
	}
	return reply(http.StatusOK, "applied", "sent %s to wave %s", cmd.Name, id)
}

// temporalError maps a failed Temporal call to what a broker should do:
// retry later (503), slow down (429), or retry as an unknown failure (500).
func (r *Receiver) temporalError(err error, what string) result {
	r.Gate.Failed(err)
	var (
		unavailable *serviceerror.Unavailable
		exhausted   *serviceerror.ResourceExhausted
		deadline    *serviceerror.DeadlineExceeded
	)
	switch {
	case errors.As(err, &exhausted):
		return reply(http.StatusTooManyRequests, "throttled", "%s: Temporal is throttling: %v", what, err)
	case errors.As(err, &unavailable), errors.As(err, &deadline), errors.Is(err, context.DeadlineExceeded):
		return reply(http.StatusServiceUnavailable, "unavailable", "%s: Temporal unavailable: %v", what, err)
	}
	return reply(http.StatusInternalServerError, "error", "%s: %v", what, err)
}

func kubeError(err error) result {
	if apierrors.IsTooManyRequests(err) {
		return reply(http.StatusTooManyRequests, "throttled", "%v", err)
	}
	return reply(http.StatusServiceUnavailable, "unavailable", "Kubernetes API unavailable: %v", err)
}
