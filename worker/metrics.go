package worker

import (
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// promMetrics exposes the Temporal SDK's metrics (task latencies, polls,
// activity failures...) to Prometheus. The SDK names metrics and tags freely;
// Prometheus wants one fixed label set per name, so the first use of a name
// fixes its labels and later tags are fitted to them.
type promMetrics struct {
	reg  prometheus.Registerer
	log  *slog.Logger
	mu   *sync.Mutex
	vecs map[vecKey]*promVec
	// tags are this handler's, by label name (sanitized once here: the SDK
	// asks for a metric on every emission, each poll, task and request).
	tags map[string]string
}

type vecKey struct{ kind, name string }

type promVec struct {
	labels  []string
	counter *prometheus.CounterVec
	gauge   *prometheus.GaugeVec
	hist    *prometheus.HistogramVec
}

func newPromMetrics(reg prometheus.Registerer, log *slog.Logger) *promMetrics {
	return &promMetrics{reg: reg, log: log, mu: &sync.Mutex{}, vecs: map[vecKey]*promVec{}, tags: map[string]string{}}
}

var _ client.MetricsHandler = (*promMetrics)(nil)

func (m *promMetrics) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(m.tags)+len(tags))
	for k, v := range m.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[sanitize(k)] = v
	}
	return &promMetrics{reg: m.reg, log: m.log, mu: m.mu, vecs: m.vecs, tags: merged}
}

func (m *promMetrics) Counter(name string) client.MetricsCounter {
	v, values := m.vec(name, "counter")
	if v == nil || v.counter == nil {
		return client.MetricsNopHandler.Counter(name)
	}
	return counter{v.counter.WithLabelValues(values...)}
}

func (m *promMetrics) Gauge(name string) client.MetricsGauge {
	v, values := m.vec(name, "gauge")
	if v == nil || v.gauge == nil {
		return client.MetricsNopHandler.Gauge(name)
	}
	return gauge{v.gauge.WithLabelValues(values...)}
}

func (m *promMetrics) Timer(name string) client.MetricsTimer {
	v, values := m.vec(name, "timer")
	if v == nil || v.hist == nil {
		return client.MetricsNopHandler.Timer(name)
	}
	return timer{v.hist.WithLabelValues(values...)}
}

// vec finds or registers the metric behind name and returns the label
// values for this handler's tags: missing labels are empty, extra tags are
// dropped.
func (m *promMetrics) vec(name, kind string) (*promVec, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := vecKey{kind, name}
	v, ok := m.vecs[key]
	if !ok {
		labels := make([]string, 0, len(m.tags))
		for k := range m.tags {
			labels = append(labels, k)
		}
		sort.Strings(labels)
		v = &promVec{labels: labels}
		metric := sanitize(name)
		var c prometheus.Collector
		switch kind {
		case "counter":
			v.counter = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metric, Help: "Temporal SDK counter " + name}, labels)
			c = v.counter
		case "gauge":
			v.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metric, Help: "Temporal SDK gauge " + name}, labels)
			c = v.gauge
		default:
			v.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metric + "_seconds", Help: "Temporal SDK timer " + name,
				Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, labels)
			c = v.hist
		}
		if err := m.reg.Register(c); err != nil {
			m.log.Warn("cannot export Temporal SDK metric", "metric", name, "error", err)
			v = nil
		}
		m.vecs[key] = v
	}
	if v == nil {
		return nil, nil
	}
	values := make([]string, len(v.labels))
	for i, l := range v.labels {
		values[i] = m.tags[l]
	}
	return v, values
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, name)
}

type counter struct{ c prometheus.Counter }

func (c counter) Inc(n int64) { c.c.Add(float64(n)) }

type gauge struct{ g prometheus.Gauge }

func (g gauge) Update(v float64) { g.g.Set(v) }

type timer struct{ h prometheus.Observer }

func (t timer) Record(d time.Duration) { t.h.Observe(d.Seconds()) }
