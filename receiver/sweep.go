package receiver

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/events"
)

// sweptBy is the principal a swept offer names.
const sweptBy = "sluice-receiver's sweep"

// Sweep is the backstop for a trigger whose every event was lost: the
// ApiServerSource adapter gives up on an event after a few tries (say while
// the receiver restarts, or Temporal is unreachable), and Knative sends no
// more about a Revision once it is Ready. For each opted-in target in the
// caches whose newest Revision serves no traffic, carries no ended mark and
// is not the candidate of the target's latest rollout, Sweep offers it as
// its event would have. It returns how many it offered. The check costs no
// API call for a target whose newest Revision serves; the rest cost a
// describe of the target's rollout (Temporal's own record: the visibility
// store may not show yet a run that has just ended, and the sweep would then
// roll its candidate out again), and a Revision read if it is offered.
func (r *Receiver) Sweep(ctx context.Context) int {
	if r.Targets == nil || (r.Gate != nil && r.Gate.Err() != nil) {
		return 0
	}
	offered := 0
	for _, n := range r.Targets.Newest() {
		ref := n.Target.Ref
		if why := alreadyHandled(n.Target, events.Action{Name: n.Revision}); why != "" {
			continue
		}
		key := "swept:" + ref.Namespace + "/" + n.Revision
		if r.Seen.Has(key) {
			continue
		}
		latest, ok, err := r.Control.Latest(ctx, ref)
		if err != nil {
			r.Log.Info("sweep: read the latest rollout of a target", "target", ref.String(), "error", err)
			continue
		}
		if ok && latest.Candidate == n.Revision {
			r.Seen.Add(key) // its rollout has it, or had it and ended
			continue
		}
		a := events.Action{Kind: events.KindRevision, ObjectKind: "Revision", Namespace: ref.Namespace, Name: n.Revision, NeedsRead: true}
		res := r.revision(ctx, a, sweptBy, true)
		r.Log.Info("sweep: a Revision no event brought", "target", ref.String(), "revision", n.Revision, "code", res.code, "message", res.message)
		if res.code == http.StatusAccepted {
			offered++
			r.Seen.Add(key)
		}
	}
	return offered
}

// RunSweeps sweeps every period until ctx ends.
func (r *Receiver) RunSweeps(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sweep(ctx)
		}
	}
}
