// Package requestsim plays the requests of sluice's local stack, where no
// ingress routes any. Each tick it reads every Route's status traffic
// (watched through informers) and splits a steady request rate over the
// Revisions by their percent. A Revision whose pods run Knative's real
// queue-proxy (see SetTargets) gets those requests as real HTTP requests,
// sent to its pods' queue-proxies in turn: the queue-proxies count them
// and Prometheus scrapes them as in a cluster. Every other Revision's share
// is only remembered, as the load its pods report to Knative's autoscaler
// through the stand-in for their stats (see Stats). App is the user
// container behind a real queue-proxy; a Revision's template annotations
// say how it behaves (see the Annotation* keys), so a test can roll out a
// "bad" Revision.
package requestsim

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
)

// Template annotations that steer how a Revision's user container answers.
const (
	// AnnotationErrorRate is the share of requests answered 500, e.g. "0.2".
	AnnotationErrorRate = "sim.sluice.dev/error-rate"
	// AnnotationLatency is every request's latency, e.g. "800ms" (default 20ms).
	AnnotationLatency = "sim.sluice.dev/latency"
	// AnnotationRate, on a Service (Knative copies it to its Route), is the
	// Route's request rate per second in place of the Sim's, e.g. "0.1".
	AnnotationRate = "sim.sluice.dev/rate"
)

// DefaultLatency is a healthy Revision's request latency.
const DefaultLatency = 20 * time.Millisecond

// maxInFlight bounds the requests in flight at once: a Revision that
// answers slowly must not grow the test process without bound.
const maxInFlight = 512

// Behaviour is how a Revision's user container answers.
type Behaviour struct {
	Latency   time.Duration
	ErrorRate float64
}

// BehaviourOf reads a Revision's template annotations; values it cannot
// read are left at a healthy container's.
func BehaviourOf(annotations map[string]string) Behaviour {
	b := Behaviour{Latency: DefaultLatency}
	if v, err := strconv.ParseFloat(annotations[AnnotationErrorRate], 64); err == nil && v >= 0 && v <= 1 {
		b.ErrorRate = v
	}
	if d, err := time.ParseDuration(annotations[AnnotationLatency]); err == nil && d > 0 {
		b.Latency = d
	}
	return b
}

// App is a stub user container: it answers every request after Latency,
// and exactly ErrorRate of them (spread evenly) with 500.
type App struct {
	Behaviour
	served atomic.Int64
}

func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := float64(a.served.Add(1))
	select {
	case <-time.After(a.Latency):
	case <-r.Context().Done():
		return
	}
	if math.Floor(n*a.ErrorRate) > math.Floor((n-1)*a.ErrorRate) {
		http.Error(w, "simulated failure", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// Sim plays the requests.
type Sim struct {
	Serving   servingclient.Interface
	Namespace string
	// RPS is the request rate of each Route, split over its Revisions.
	RPS float64
	// Client sends the real requests; its transport must reach pod IPs.
	Client *http.Client
	Log    *slog.Logger

	mu sync.Mutex
	// owed carries each Revision's fraction of a request to the next tick,
	// so a Revision with 20% of 50 rps gets exactly 10 a second over time.
	owed map[string]float64
	// load is each Revision's request rate and latency at the last tick,
	// which the autoscaler's scrapes of stand-in pods are answered from.
	load map[string]load
	// targets are the queue-proxy addresses of each Revision with real
	// ones; next picks among them in turn.
	targets map[string][]string
	next    map[string]int

	inFlight        atomic.Int64
	sent, failed    atomic.Int64
	dropped         atomic.Int64
	requests        sync.WaitGroup
	lastFailureNote atomic.Int64
}

type load struct {
	rps     float64
	latency time.Duration
}

// New builds a Sim.
func New(serving servingclient.Interface, namespace string, rps float64, client *http.Client, log *slog.Logger) *Sim {
	return &Sim{Serving: serving, Namespace: namespace, RPS: rps, Client: client, Log: log,
		owed: map[string]float64{}, load: map[string]load{}, targets: map[string][]string{}, next: map[string]int{}}
}

// SetTargets names the queue-proxies ("ip:port") serving revision; none
// puts the Revision back on the stand-in.
func (s *Sim) SetTargets(revision string, addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(addrs) == 0 {
		delete(s.targets, revision)
		return
	}
	s.targets[revision] = append([]string(nil), addrs...)
}

// Targets are the queue-proxies serving revision, as SetTargets named them.
func (s *Sim) Targets(revision string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.targets[revision]...)
}

// Counts reports the real requests sent, those that got no HTTP answer,
// and those not sent because too many were in flight.
func (s *Sim) Counts() (sent, failed, dropped int64) {
	return s.sent.Load(), s.failed.Load(), s.dropped.Load()
}

// Run plays the requests of each tick from the informers' caches until ctx
// is done, so ticking costs the API server nothing; then it waits for the
// requests in flight.
func (s *Sim) Run(ctx context.Context, tick time.Duration) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.Serving, 0, informers.WithNamespace(s.Namespace))
	revs := factory.Serving().V1().Revisions().Lister().Revisions(s.Namespace)
	routes := factory.Serving().V1().Routes().Lister().Routes(s.Namespace)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())
	defer s.requests.Wait()
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rv, err1 := revs.List(labels.Everything())
			rt, err2 := routes.List(labels.Everything())
			if err := errors.Join(err1, err2); err != nil {
				s.Log.Warn("requestsim: read caches", "error", err)
				continue
			}
			for _, send := range s.record(rv, rt, now.Sub(last)) {
				s.send(ctx, send)
			}
			last = now
		}
	}
}

// record splits RPS×elapsed of each Route by the percents in its status,
// and returns the real requests to send (one queue-proxy address each).
func (s *Sim) record(revs []*servingv1.Revision, routes []*servingv1.Route, elapsed time.Duration) []string {
	latency := map[string]time.Duration{}
	for _, r := range revs {
		latency[r.Name] = BehaviourOf(r.Annotations).Latency
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.load)
	var sends []string
	for _, rt := range routes {
		rate := s.RPS
		if v, err := strconv.ParseFloat(rt.Annotations[AnnotationRate], 64); err == nil && v >= 0 {
			rate = v
		}
		for _, tt := range rt.Status.Traffic {
			l, ok := latency[tt.RevisionName]
			if !ok || tt.Percent == nil || *tt.Percent == 0 {
				continue
			}
			rps := rate * float64(*tt.Percent) / 100
			s.load[tt.RevisionName] = load{rps: s.load[tt.RevisionName].rps + rps, latency: l}
			addrs := s.targets[tt.RevisionName]
			if len(addrs) == 0 {
				continue
			}
			n := rps*elapsed.Seconds() + s.owed[tt.RevisionName]
			whole := math.Floor(n)
			s.owed[tt.RevisionName] = n - whole
			for range int(whole) {
				i := s.next[tt.RevisionName] % len(addrs)
				s.next[tt.RevisionName] = i + 1
				sends = append(sends, addrs[i])
			}
		}
	}
	return sends
}

// send makes one request to the queue-proxy at addr, in the background.
func (s *Sim) send(ctx context.Context, addr string) {
	if s.inFlight.Load() >= maxInFlight {
		s.dropped.Add(1)
		return
	}
	s.inFlight.Add(1)
	s.requests.Add(1)
	go func() {
		defer s.requests.Done()
		defer s.inFlight.Add(-1)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			return
		}
		s.sent.Add(1)
		resp, err := s.Client.Do(req)
		if err != nil {
			s.failed.Add(1)
			// One line every few seconds is enough to say it happens.
			if now := time.Now().Unix(); ctx.Err() == nil && s.lastFailureNote.Swap(now) < now-5 {
				s.Log.Warn("requestsim: request got no answer", "queue-proxy", addr, "error", err)
			}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
}
