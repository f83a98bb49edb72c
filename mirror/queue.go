package mirror

import (
	"context"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// The progress activity does not wait for the mirror: it hands each event
// to the writer's queue (Enqueue) and returns, and one loop (drain) writes
// the queue out at a bounded rate. While a target's events wait their
// turn, later ones join them: its Rollout is written once for all of them,
// and of consecutive Kubernetes events of the same reason only the last is
// recorded. However many rollouts run, the mirror asks the API server for
// at most Rate writes a second, so on a busy API server it takes
// longer to catch up instead of taking more of the server from the
// rollouts' own traffic writes.
const (
	// DefaultWriteRate is the writes a second the queue is written out
	// at, unless Writer.Rate says otherwise; twice as many may go at once.
	DefaultWriteRate = 10
	// flushTimeout bounds the writes of what is still queued when the
	// worker stops.
	flushTimeout = 5 * time.Second
)

// queue holds the progress events not written yet, by target, in the order
// the targets' first waiting events came.
type queue struct {
	mu      sync.Mutex
	waiting map[string][]events.Progress
	order   []string
	wake    chan struct{}
}

func (q *queue) init() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting == nil {
		q.waiting, q.wake = map[string][]events.Progress{}, make(chan struct{}, 1)
	}
}

func (q *queue) push(key string, p events.Progress) {
	q.init()
	q.mu.Lock()
	if _, ok := q.waiting[key]; !ok {
		q.order = append(q.order, key)
	}
	q.waiting[key] = append(q.waiting[key], p)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// first is the key whose turn is next; "" when nothing waits.
func (q *queue) first() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return ""
	}
	return q.order[0]
}

// take removes key's events from the queue and returns them.
func (q *queue) take(key string) []events.Progress {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.waiting[key]
	delete(q.waiting, key)
	for i, k := range q.order {
		if k == key {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
	return batch
}

// Enqueue hands p to the writer and returns at once; the writer's drain
// loop (started by Serve) shows it. A worker killed before the write loses
// it, and its next start rewrites every Rollout not ended from its
// workflow (Refresher.Run).
func (w *Writer) Enqueue(p events.Progress) {
	if !w.mirrors(p) {
		return
	}
	d := p.Data
	w.q.push(d.Namespace+"/"+d.Kind+"/"+d.Name, p)
}

// drain writes the queue out until ctx is done, then what is left of it
// within flushTimeout.
func (w *Writer) drain(ctx context.Context) {
	w.q.init()
	pace := w.Rate
	if pace < 1 {
		pace = DefaultWriteRate
	}
	lim := rate.NewLimiter(rate.Limit(pace), 2*pace)
	for {
		key := w.q.first()
		if key == "" {
			select {
			case <-ctx.Done():
				w.flush()
				return
			case <-w.q.wake:
				continue
			}
		}
		// The wait for a turn is when later events join the batch.
		if err := lim.Wait(ctx); err != nil {
			w.flush()
			return
		}
		// A stop while the batch is written ends its pacing, not its
		// writes: the rest of it goes at once, then flush.
		w.progress(context.WithoutCancel(ctx), w.q.take(key), func() { _ = lim.Wait(ctx) })
	}
}

// flush writes what is still queued, unpaced, as the worker stops.
func (w *Writer) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	for key := w.q.first(); key != "" && ctx.Err() == nil; key = w.q.first() {
		w.progress(ctx, w.q.take(key), nil)
	}
}

// progress writes one target's batch of progress events, in order: its
// Rollout once, then the batch's Kubernetes events, each after pace (nil:
// unpaced) and each within writeTimeout of ctx. A failure is logged, never
// returned: the mirror must not fail the rollout.
func (w *Writer) progress(ctx context.Context, batch []events.Progress, pace func()) {
	if len(batch) == 0 {
		return
	}
	d := batch[len(batch)-1].Data
	t := knative.TargetRef{Namespace: d.Namespace, Kind: d.Kind, Name: d.Name}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	uid, err := w.write(wctx, t, func(prev Status) Status {
		for _, p := range batch {
			w.Metrics.progress(p, prev)
			// A late event (a retried activity's) never takes the
			// Rollout back.
			if next := FromProgress(p, prev); next.newer(prev) {
				prev = next
			}
		}
		return prev
	})
	if err != nil {
		w.Log.Warn("Rollout resource not written", "target", t.String(), "event", batch[len(batch)-1].ID, "error", err)
	}
	if uid == "" {
		return
	}
	for _, p := range recorded(batch) {
		if pace != nil {
			pace()
		}
		ectx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := w.event(ectx, t, uid, p)
		cancel()
		if err != nil {
			w.Log.Warn("Kubernetes event not recorded", "target", t.String(), "event", p.ID, "error", err)
		}
	}
}

// mirrors reports whether p shows on a Rollout: the cluster serves them,
// and p is a rollout's (a wave's event has no single target).
func (w *Writer) mirrors(p events.Progress) bool {
	return w.Served() && strings.HasPrefix(p.Type, events.ProgressPrefix)
}

// recorded are the batch's events that show as Kubernetes events: of a
// run of them with the same reason (steps taken while the batch waited),
// the last.
func recorded(batch []events.Progress) []events.Progress {
	var out []events.Progress
	last := ""
	for _, p := range batch {
		typ, reason := eventKind(p)
		if typ == "" {
			continue
		}
		if reason == last {
			out = out[:len(out)-1]
		}
		out, last = append(out, p), reason
	}
	return out
}
