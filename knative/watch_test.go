package knative

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func revisionWithPods(pods int32, rv string) *servingv1.Revision {
	r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "r", ResourceVersion: rv}}
	r.Status.ActualReplicas = &pods
	return r
}

// An API server restarted mid-wait closes the watch, refuses the re-read
// and the next watch for a while; the wait goes on through it and sees the
// change made meanwhile, rather than answering with what it read before.
// (A capacity stage once paused for pods that had come up while the API
// server restarted.)
func TestWatchOutlastsAnAPIServerRestart(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:6443: connect: " + syscall.ECONNREFUSED.Error())
	first := watch.NewFake()
	opens, reads := 0, 0
	var pods int32
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			opens++
			switch opens {
			case 1:
				return first, nil
			case 2, 3:
				return nil, refused
			}
			fw := watch.NewFake()
			go fw.Modify(revisionWithPods(2, "12"))
			return fw, nil
		},
		read: func(ctx context.Context) (runtime.Object, error) {
			reads++
			return nil, refused
		},
		done: func(_ watch.EventType, obj runtime.Object) bool {
			if r, ok := obj.(*servingv1.Revision); ok {
				pods = *r.Status.ActualReplicas
			}
			return pods >= 2
		},
	}
	go func() {
		first.Modify(revisionWithPods(1, "10"))
		first.Stop() // the API server goes away
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reached, err := w.until(ctx, "9")
	if err != nil || !reached || pods != 2 {
		t.Fatalf("until: reached %v, err %v, pods %d; want the 2 pods seen once the API server was back", reached, err, pods)
	}
	if opens != 4 || reads != 1 {
		t.Fatalf("%d watches opened and %d reads; want 4 (one answered, two refused, one answered) and 1", opens, reads)
	}
}

// A watch that can never be opened is an error at once, for the caller to
// fall back to re-reading; the wait does not spin on it.
func TestWatchForbiddenIsAnError(t *testing.T) {
	w := watcher{
		open: func(context.Context, string) (watch.Interface, error) {
			return nil, apierrors.NewForbidden(schema.GroupResource{Group: "serving.knative.dev", Resource: "revisions"}, "r", errors.New("no watch"))
		},
		read: func(context.Context) (runtime.Object, error) { t.Fatal("read"); return nil, nil },
		done: func(watch.EventType, runtime.Object) bool { return false },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if reached, err := w.until(ctx, "1"); reached || !apierrors.IsForbidden(errors.Unwrap(err)) {
		t.Fatalf("until: reached %v, err %v; want the Forbidden error", reached, err)
	}
	if ctx.Err() != nil {
		t.Fatal("until waited for the context on a Forbidden watch")
	}
}

// A wait whose context ends while the API server is away answers at once.
func TestWatchAwayEndsWithItsContext(t *testing.T) {
	w := watcher{
		open: func(context.Context, string) (watch.Interface, error) { return nil, errors.New("connection refused") },
		read: func(context.Context) (runtime.Object, error) { return nil, nil },
		done: func(watch.EventType, runtime.Object) bool { return false },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	if reached, err := w.until(ctx, "1"); reached || err != nil {
		t.Fatalf("until: reached %v, err %v; want neither", reached, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("until took %s after its context ended", took)
	}
}

// A watch refused as too old (410: thousands of objects of the kind changed
// since the version read) is opened again from the server's cache ("0"),
// not from the version read again, which was a loop of reads and refused
// watches; an object the cache has from before the read is not taken for
// news.
func TestWatchTooOldWatchesFromTheCache(t *testing.T) {
	svc := func(generation int64, rv string, ready bool) *servingv1.Service {
		s := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: generation, ResourceVersion: rv}}
		if ready {
			s.Status.ObservedGeneration = generation
		}
		return s
	}
	var versions []string
	var at int64 // the generation done last looked at
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			versions = append(versions, rv)
			fw := watch.NewFake()
			if len(versions) == 1 {
				go func() {
					fw.Error(&apierrors.NewResourceExpired("too old resource version: 10 (500)").ErrStatus)
					fw.Stop()
				}()
				return fw, nil
			}
			go func() {
				fw.Add(svc(2, "480", true)) // the cache, behind the read
				fw.Modify(svc(3, "520", true))
			}()
			return fw, nil
		},
		read: func(ctx context.Context) (runtime.Object, error) { return svc(3, "505", false), nil },
		done: func(_ watch.EventType, obj runtime.Object) bool {
			s := obj.(*servingv1.Service)
			at = s.Generation
			return s.Status.ObservedGeneration > 0 && s.Status.ObservedGeneration == s.Generation
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reached, err := w.until(ctx, "10")
	if err != nil || !reached || at != 3 {
		t.Fatalf("reached %v at generation %d, %v; want the status of generation 3", reached, at, err)
	}
	if len(versions) != 2 || versions[0] != "10" || versions[1] != "0" {
		t.Fatalf("watches opened at %q; want the version read, then the cache's (\"0\")", versions)
	}
}
