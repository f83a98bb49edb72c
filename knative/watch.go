package knative

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watcher waits for one object to reach a state, by watching it: an activity
// that waits this way answers the moment the API server reports the change,
// where polling would answer up to a poll interval late and cost a request
// (and, retried by Temporal, a billable activity attempt) per look.
type watcher struct {
	open func(ctx context.Context, resourceVersion string) (watch.Interface, error)
	// read re-reads the object after the API server closes a watch early.
	read func(ctx context.Context) (runtime.Object, error)
	// done reports whether the object is in the awaited state; it may
	// record why not. A deleted object comes with watch.Deleted (and may be
	// nil when a re-read found it gone).
	done func(watch.EventType, runtime.Object) bool
}

// until watches from resourceVersion and reports whether the state was
// reached before ctx ended. A deleted object is passed to done as well. An
// error means a watch cannot be opened at all (no right to, no such kind):
// the caller falls back to re-reading, slower and dearer, and should say
// why. While the API server is away — a restart, a network fault — it
// waits and watches again until ctx ends: the object may reach the state
// meanwhile, and answering early with what was read before would tell the
// caller it never did.
func (w watcher) until(ctx context.Context, resourceVersion string) (bool, error) {
	var away retryDelay
	// floor is the generation last read: a watch from the server's cache
	// may begin with the object as it was before that, which is stale.
	var floor int64
	for ctx.Err() == nil {
		wi, err := w.open(ctx, resourceVersion)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			if cannotWatch(err) {
				return false, fmt.Errorf("watch: %w", err)
			}
			if !away.wait(ctx) {
				return false, nil
			}
			continue
		}
		reached, closed := w.drain(ctx, wi, &resourceVersion, floor)
		wi.Stop()
		if reached {
			return true, nil
		}
		if !closed {
			return false, nil // ctx ended
		}
		obj, err := w.read(ctx)
		if apierrors.IsNotFound(err) {
			return w.done(watch.Deleted, nil), nil
		}
		if err != nil {
			// Watch again from the last version seen: the events since then
			// come with it (or, if the server no longer has them, the watch
			// closes at once and the next read catches up).
			if !away.wait(ctx) {
				return false, nil
			}
			continue
		}
		away = 0
		if w.done(watch.Modified, obj) {
			return true, nil
		}
		if m, err := meta.Accessor(obj); err == nil {
			floor = m.GetGeneration()
		}
		// Watch again from the API server's cache ("0"), which starts with
		// the object as the cache has it, rather than from the version just
		// read: the server keeps a short window of versions of a kind, and
		// when thousands of its objects change, a watch from a version read
		// a moment ago is refused as too old at once — a read and a watch,
		// again and again, for every waiting rollout (a mass deploy of
		// 5,000 Services made the worker's requests a loop of these).
		resourceVersion = "0"
	}
	return false, nil
}

// cannotWatch tells a watch that can never be opened from an API server
// that is away for now.
func cannotWatch(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)
}

// retryDelay is how long to wait before the next try while the API server
// is away: 250ms, doubling up to 4s.
type retryDelay time.Duration

// wait sleeps for the next delay, and reports false if ctx ended first.
func (d *retryDelay) wait(ctx context.Context) bool {
	*d = retryDelay(min(max(2*time.Duration(*d), 250*time.Millisecond), 4*time.Second))
	t := time.NewTimer(time.Duration(*d))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// drain reads events until the state is reached, the watch closes, or ctx
// ends (a fake clientset's watch ignores ctx, so it is checked here). An
// object of a generation below floor is skipped.
func (w watcher) drain(ctx context.Context, wi watch.Interface, resourceVersion *string, floor int64) (reached, closed bool) {
	for {
		select {
		case <-ctx.Done():
			return false, false
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return false, true
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
				continue
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				if m.GetGeneration() < floor {
					continue // the cache, behind what was read
				}
				*resourceVersion = m.GetResourceVersion()
			}
			if w.done(ev.Type, ev.Object) {
				return true, false
			}
		}
	}
}
