package knative

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Feed serves the changes of one Service or Route from informers a process
// already runs, in place of a watch of its own on the API server: where the
// worker and the receiver share a process, each rollout waiting on its
// traffic costs no request and no second decode of the same change.
type Feed interface {
	// Follow returns a watch of o's changes that starts with o as the
	// cache holds it now and never closes on its own, or false when o is
	// outside what the cache holds.
	Follow(o ObjectRef) (watch.Interface, bool)
}

// feedKey names one followed object.
type feedKey struct{ kind, namespace, name string }

// trafficFeed hands the informers' events to the watches that follow their
// objects. A follower needs only the newest state, so a follower that has
// not read the last event has it replaced by the next: the informer never
// waits on a slow rollout.
type trafficFeed struct {
	mu   sync.Mutex
	subs map[feedKey]map[*feedWatch]struct{}
}

func newTrafficFeed() *trafficFeed {
	return &trafficFeed{subs: map[feedKey]map[*feedWatch]struct{}{}}
}

// handler passes kind's informer events to the followers of their objects.
func (f *trafficFeed) handler(kind string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.send(kind, watch.Added, obj) },
		UpdateFunc: func(_, obj any) { f.send(kind, watch.Modified, obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			f.send(kind, watch.Deleted, obj)
		},
	}
}

func (f *trafficFeed) send(kind string, typ watch.EventType, obj any) {
	o, ok := obj.(runtime.Object)
	if !ok {
		return
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.subs[feedKey{kind, m.GetNamespace(), m.GetName()}] {
		w.offer(watch.Event{Type: typ, Object: o})
	}
}

// follow registers a watch of key and, under the same lock, offers it
// current (the cache's object now, nil if it holds none), so that no event
// between the two is lost.
func (f *trafficFeed) follow(key feedKey, current func() (runtime.Object, bool)) *feedWatch {
	w := &feedWatch{ch: make(chan watch.Event, 1)}
	w.stop = func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs[key], w)
		if len(f.subs[key]) == 0 {
			delete(f.subs, key)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs[key] == nil {
		f.subs[key] = map[*feedWatch]struct{}{}
	}
	f.subs[key][w] = struct{}{}
	if obj, ok := current(); ok {
		w.offer(watch.Event{Type: watch.Added, Object: obj})
	}
	return w
}

// feedWatch is one follower: a watch.Interface whose channel holds the
// newest event not yet read. The objects are the informer's own and must
// not be changed.
type feedWatch struct {
	ch   chan watch.Event
	stop func()
	once sync.Once
}

func (w *feedWatch) Stop()                          { w.once.Do(w.stop) }
func (w *feedWatch) ResultChan() <-chan watch.Event { return w.ch }

// offer puts ev in the channel in place of an unread older one. Only the
// feed sends, under its lock, so after the drain the send cannot block.
func (w *feedWatch) offer(ev watch.Event) {
	select {
	case w.ch <- ev:
		return
	default:
	}
	select {
	case <-w.ch:
	default:
	}
	w.ch <- ev
}
