// Package requestsim is a test double of the request metrics Knative's
// queue-proxy exports per Revision, for sluice's local stack. Nothing on the
// stack serves real requests, so requestsim plays the requests: each tick it
// reads every Route's status traffic (watched through informers), splits a
// steady request rate over the Revisions by their percent, and counts the
// requests each Revision would have answered under both sets of names
// Knative has used: OpenTelemetry's (kn_serving_invocation_duration_seconds,
// recent releases) and OpenCensus's (revision_request_count,
// revision_request_latencies). A Revision's template annotations say how it
// behaves (see the Annotation* keys), so a test can roll out a "bad"
// Revision. Prometheus scrapes Handler.
package requestsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
)

// Template annotations that steer a Revision's simulated requests.
const (
	// AnnotationErrorRate is the share of requests answered 500, e.g. "0.2".
	AnnotationErrorRate = "sim.sluice.dev/error-rate"
	// AnnotationLatency is every request's latency, e.g. "800ms" (default 20ms).
	AnnotationLatency = "sim.sluice.dev/latency"
)

// DefaultLatency is a healthy Revision's request latency.
const DefaultLatency = 20 * time.Millisecond

// latencyBuckets are the bucket bounds of revision_request_latencies, in
// milliseconds; secondsBuckets those of kn_serving_invocation_duration.
var (
	latencyBuckets = []float64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
	secondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
)

// Sim counts simulated requests.
type Sim struct {
	Serving   servingclient.Interface
	Namespace string
	// RPS is the request rate of each Route, split over its Revisions.
	RPS float64
	Log *slog.Logger

	registry  *prometheus.Registry
	count     *prometheus.CounterVec
	latencies *prometheus.HistogramVec
	duration  *prometheus.HistogramVec

	mu sync.Mutex
	// owed carries each series' fraction of a request to the next tick, so
	// a 20% error rate is exactly 20% over time.
	owed map[string]float64
	// load is each Revision's request rate and latency at the last tick,
	// which the autoscaler's scrapes are answered from (see Stats).
	load map[string]load
}

type load struct {
	rps     float64
	latency time.Duration
}

// New builds a Sim with its own metric registry.
func New(serving servingclient.Interface, namespace string, rps float64, log *slog.Logger) *Sim {
	labels := []string{"namespace_name", "service_name", "configuration_name", "revision_name", "response_code", "response_code_class"}
	s := &Sim{
		Serving: serving, Namespace: namespace, RPS: rps, Log: log,
		registry: prometheus.NewRegistry(),
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "revision_request_count", Help: "The number of requests that are routed to queue-proxy",
		}, labels),
		latencies: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "revision_request_latencies", Help: "The response time in millisecond", Buckets: latencyBuckets,
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kn_serving_invocation_duration_seconds", Help: "The duration of task execution", Buckets: secondsBuckets,
		}, []string{"k8s_namespace_name", "kn_service_name", "kn_configuration_name", "kn_revision_name", "http_response_status_code"}),
		owed: map[string]float64{}, load: map[string]load{},
	}
	s.registry.MustRegister(s.count, s.latencies, s.duration)
	return s
}

// Handler serves the metrics in Prometheus' text format.
func (s *Sim) Handler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
}

// Run watches Revisions and Routes through informers and plays the requests
// of each tick from their caches until ctx is done, so ticking costs the API
// server nothing.
func (s *Sim) Run(ctx context.Context, tick time.Duration) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.Serving, 0, informers.WithNamespace(s.Namespace))
	revs := factory.Serving().V1().Revisions().Lister().Revisions(s.Namespace)
	routes := factory.Serving().V1().Routes().Lister().Routes(s.Namespace)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())
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
			s.record(rv, rt, now.Sub(last))
			last = now
		}
	}
}

// Tick plays the requests of elapsed from a fresh list of Revisions and
// Routes.
func (s *Sim) Tick(ctx context.Context, elapsed time.Duration) error {
	revs, err := s.Serving.ServingV1().Revisions(s.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list Revisions: %w", err)
	}
	routes, err := s.Serving.ServingV1().Routes(s.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list Routes: %w", err)
	}
	s.record(pointers(revs.Items), pointers(routes.Items), elapsed)
	return nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

type behaviour struct {
	errorRate float64
	latency   time.Duration
	service   string
	config    string
}

// record plays the requests of elapsed: RPS×elapsed per Route, split by the
// percents in its status.
func (s *Sim) record(revs []*servingv1.Revision, routes []*servingv1.Route, elapsed time.Duration) {
	behaves := map[string]behaviour{}
	for _, r := range revs {
		b := behaviour{latency: DefaultLatency, service: r.Labels[serving.ServiceLabelKey], config: r.Labels[serving.ConfigurationLabelKey]}
		if v, err := strconv.ParseFloat(r.Annotations[AnnotationErrorRate], 64); err == nil && v >= 0 && v <= 1 {
			b.errorRate = v
		}
		if d, err := time.ParseDuration(r.Annotations[AnnotationLatency]); err == nil && d > 0 {
			b.latency = d
		}
		behaves[r.Name] = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.load)
	for _, rt := range routes {
		for _, tt := range rt.Status.Traffic {
			b, ok := behaves[tt.RevisionName]
			if !ok || tt.Percent == nil || *tt.Percent == 0 {
				continue
			}
			rps := s.RPS * float64(*tt.Percent) / 100
			s.load[tt.RevisionName] = load{rps: s.load[tt.RevisionName].rps + rps, latency: b.latency}
			n := rps * elapsed.Seconds()
			s.play(tt.RevisionName, b, n*b.errorRate, "500", "5xx")
			s.play(tt.RevisionName, b, n*(1-b.errorRate), "200", "2xx")
		}
	}
}

// play counts n requests (carrying the fraction) of one response code.
func (s *Sim) play(revision string, b behaviour, n float64, code, class string) {
	key := revision + "/" + code
	n += s.owed[key]
	whole := math.Floor(n)
	s.owed[key] = n - whole
	if whole == 0 {
		return
	}
	labels := prometheus.Labels{"namespace_name": s.Namespace, "service_name": b.service, "configuration_name": b.config,
		"revision_name": revision, "response_code": code, "response_code_class": class}
	s.count.With(labels).Add(whole)
	ms := float64(b.latency) / float64(time.Millisecond)
	h := s.latencies.With(labels)
	d := s.duration.With(prometheus.Labels{"k8s_namespace_name": s.Namespace, "kn_service_name": b.service,
		"kn_configuration_name": b.config, "kn_revision_name": revision, "http_response_status_code": code})
	for i := 0; i < int(whole); i++ {
		h.Observe(ms)
		d.Observe(b.latency.Seconds())
	}
}
