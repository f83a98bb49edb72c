package receiver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts events by type and outcome, and how long each took.
type Metrics struct {
	events  *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewMetrics registers the receiver's metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_receiver_events_total", Help: "CloudEvents received, by type and outcome.",
		}, []string{"type", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_receiver_event_duration_seconds", Help: "Time from request to answer, by event type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"type"}),
	}
	reg.MustRegister(m.events, m.latency)
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
