package receiver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts events by type and outcome, and how long each took.
type Metrics struct {
	events  *prometheus.CounterVec
	latency *prometheus.HistogramVec
	reads   *prometheus.CounterVec
	laters  *prometheus.CounterVec
}

// NewMetrics registers the receiver's metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_receiver_events_total", Help: "CloudEvents received, by type and outcome.",
		}, []string{"type", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_receiver_event_duration_seconds", Help: "Time from request to answer, by event type.",
			// From 50 µs: an event answered from the caches takes well
			// under a millisecond, and the buckets must tell.
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 20),
		}, []string{"type"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_receiver_target_reads_total", Help: "Reads of a Revision's target, by where they were answered: the informers' cache or the API server.",
		}, []string{"from"}),
		laters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_receiver_background_offers_total", Help: "Later states of candidates already offered (Ready, failed), answered at once and offered in the background, by outcome: offered, ended (the candidate's rollout had ended: nothing starts it again), or failed (the rollout's own watch sees the state).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.events, m.latency, m.reads, m.laters)
	return m
}

func (m *Metrics) observe(typ, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	if typ == "" {
		typ = "none"
	}
	m.events.WithLabelValues(typ, outcome).Inc()
	m.latency.WithLabelValues(typ).Observe(d.Seconds())
}

func (m *Metrics) read(from string) {
	if m != nil {
		m.reads.WithLabelValues(from).Inc()
	}
}

func (m *Metrics) later(outcome string) {
	if m != nil {
		m.laters.WithLabelValues(outcome).Inc()
	}
}
