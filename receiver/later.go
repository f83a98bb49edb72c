package receiver

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/workflows/control"
)

// DefaultMaxLater bounds the offers sent in the background at once; a
// delivery beyond it waits for a free slot, as it would for its own call.
const DefaultMaxLater = 64

// laterTimeout bounds one background offer with its retries: past it the
// rollout's own watch has long seen the state.
const laterTimeout = 30 * time.Second

// later runs background offers in order per target, at most max at once.
// Knative's adapter delivers one event at a time and waits for each answer:
// when many candidates become Ready together, each answer that waits on a
// Temporal call holds up every event behind it — on a Temporal whose writes
// take tens of milliseconds, a tenth Revision would wait for nine calls.
type later struct {
	slots chan struct{}
	mu    sync.Mutex
	lanes map[string][]func() // queued per target; a key is present while its lane drains
	busy  sync.WaitGroup
}

func newLater(max int) *later {
	if max <= 0 {
		max = DefaultMaxLater
	}
	return &later{slots: make(chan struct{}, max), lanes: map[string][]func(){}}
}

// run queues fn behind the target's earlier ones; it blocks while max are
// queued or running.
func (l *later) run(key string, fn func()) {
	l.slots <- struct{}{}
	l.busy.Add(1)
	l.mu.Lock()
	q, draining := l.lanes[key]
	l.lanes[key] = append(q, fn)
	l.mu.Unlock()
	if !draining {
		go l.drain(key)
	}
}

func (l *later) drain(key string) {
	for {
		l.mu.Lock()
		q := l.lanes[key]
		if len(q) == 0 {
			delete(l.lanes, key)
			l.mu.Unlock()
			return
		}
		fn := q[0]
		l.lanes[key] = q[1:]
		l.mu.Unlock()
		fn()
		<-l.slots
		l.busy.Done()
	}
}

// wait returns once every queued offer has run.
func (l *later) wait() { l.busy.Wait() }

func (r *Receiver) background() *later {
	r.laterOnce.Do(func() { r.laterQ = newLater(r.MaxLater) })
	return r.laterQ
}

// offerLater answers a later state of a candidate this receiver offered
// already — Ready, or failed — before Temporal has it: the candidate's
// rollout is running, and watches the Revision itself, so the state reaches
// it within the watch's grace even if this offer is lost. The offer goes
// in the background, after any earlier one for the same target, retried a
// few times.
func (r *Receiver) offerLater(req control.StartRequest, told string) result {
	return r.offerInBackground(req, told, "a Revision's new state was not offered to its rollout; the rollout's own watch of the Revision sees it")
}

// offerNew answers a new candidate before Temporal has its rollout, when the
// receiver sweeps its caches (BackgroundStarts): a mass deploy's events then
// come as fast as the adapter sends them instead of one Temporal call at a
// time, and an offer that is lost — all its tries failed, or the receiver
// stopped first — is made again by the candidate's next state (offered in
// the background too, behind it in its target's lane, and starting the
// rollout as well) or by the next sweep, which offers every opted-in
// target's newest Revision that no rollout has.
func (r *Receiver) offerNew(req control.StartRequest, told string) result {
	return r.offerInBackground(req, told, "a new candidate was not offered; its next event or the receiver's next sweep offers it again")
}

func (r *Receiver) offerInBackground(req control.StartRequest, told, lost string) result {
	target, name, state := req.Target, req.Offer.Revision, req.Offer.State
	r.background().run(target.String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), laterTimeout)
		defer cancel()
		for attempt := 1; ; attempt++ {
			outcome, err := r.deliver(ctx, req)
			if err == nil {
				r.Seen.Add(told)
				r.Metrics.later(outcome)
				return
			}
			if attempt == 3 || ctx.Err() != nil {
				r.Metrics.later("failed")
				r.Log.Warn(lost, "target", target.String(), "revision", name, "state", state.String(), "error", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
	})
	return reply(http.StatusAccepted, "offered", "offering %s (%s) to the rollout of %s", name, state, target)
}

// startedKey marks a Revision an offer of which Temporal took: a rollout of
// it ran from then on.
func startedKey(req control.StartRequest) string {
	return "started:" + req.Target.Namespace + "/" + req.Offer.Revision
}

// deliver makes a background offer and says how it went: offered, or ended.
// A later state of a Revision whose offer Temporal already took is only
// signalled: its rollout is running, or has ended — rolled back, aborted,
// superseded — and a signal-with-start would then roll the same Revision
// out again, a second "started" after the first run's end. An event can come
// that late: the adapter retries, a slow network delays it by seconds, and
// the receiver's caches may not hold the ended mark yet that would stop it.
func (r *Receiver) deliver(ctx context.Context, req control.StartRequest) (string, error) {
	if r.Seen.Has(startedKey(req)) {
		err := r.Control.Tell(ctx, req.Target, api.SignalCandidate, req.Offer)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			r.Log.Info("not offered again: the rollout of this candidate has ended",
				"target", req.Target.String(), "revision", req.Offer.Revision, "state", req.Offer.State.String())
			return "ended", nil
		}
		if err != nil {
			return "", err
		}
		return "offered", nil
	}
	if _, err := r.Control.Offer(ctx, req); err != nil {
		return "", err
	}
	r.Seen.Add(startedKey(req))
	return "offered", nil
}
