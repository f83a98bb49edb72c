package mirror

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
)

// Metrics are the rollout metrics on the worker's /metrics. Counters count
// the progress events this worker handled (sum them over workers); the
// gauges describe every Rollout resource of the cluster as the worker's
// cache holds it (each worker reports them all: take max over workers).
type Metrics struct {
	started  prometheus.Counter
	ended    *prometheus.CounterVec
	verdicts *prometheus.CounterVec
	steps    prometheus.Histogram
	writes   *prometheus.HistogramVec
	state    *stateCollector

	mu   sync.Mutex
	seen map[string]bool // event IDs counted, so a retried activity counts once
	fifo []string
}

// maxSeen bounds the event IDs remembered: far more than the events one
// worker handles while a retry of one of them can still come.
const maxSeen = 10000

// NewMetrics registers the rollout metrics in reg; the gauges read w's
// cache of Rollout resources once it has one (none when w is nil: the
// cluster has no Rollout resources, and the counters stay at zero too).
func NewMetrics(reg prometheus.Registerer, w *Writer) *Metrics {
	m := &Metrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rollouts_started_total",
			Help: "Rollouts started (their first progress event), counted by the worker that sent it."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rollouts_ended_total",
			Help: "Rollouts ended, by outcome (Succeeded, RolledBack, Aborted, Superseded, Failed)."}, []string{"outcome"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_analysis_measurements_total",
			Help: "Analysis measurements, by check and result (Passed, Failed, Inconclusive, Error, Marginal)."}, []string{"check", "result"}),
		steps: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_rollout_step_seconds",
			Help:    "Time from one step's traffic write to the next step's: the hold, its analysis and the write and verification of the next share.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600}}),
		writes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_traffic_write_seconds",
			Help:    "One traffic write and its verification in Knative's status (the ApplyTraffic activity), by whether the status showed it in time.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60}}, []string{"visible"}),
		seen: map[string]bool{},
	}
	m.state = &stateCollector{w: w}
	reg.MustRegister(m)
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.started, m.ended, m.verdicts, m.steps, m.writes, m.state}
}

// Describe describes every rollout metric (prometheus.Collector).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect collects every rollout metric (prometheus.Collector).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// TrafficWrite records one ApplyTraffic's duration.
func (m *Metrics) TrafficWrite(d time.Duration, visible bool) {
	if m == nil {
		return
	}
	v := "false"
	if visible {
		v = "true"
	}
	m.writes.WithLabelValues(v).Observe(d.Seconds())
}

// progress counts one progress event; prev is the Rollout's status before it.
func (m *Metrics) progress(p events.Progress, prev Status) {
	if m == nil || !m.first(p.ID) {
		return
	}
	switch {
	case p.Type == events.ProgressStarted:
		m.started.Inc()
	case p.Type == events.ProgressAnalysis:
		for _, ms := range p.Data.Measurements {
			m.verdicts.WithLabelValues(ms.Name, string(ms.Result)).Inc()
		}
	case p.Type == events.ProgressStep && prev.RolloutID == rolloutOf(p.ID) && prev.StepStartedAt != nil &&
		prev.Step == p.Data.Step-1:
		m.steps.Observe(p.Time.Sub(prev.StepStartedAt.Time).Seconds())
	}
	if d := endEvents[p.Type]; d != "" {
		m.ended.WithLabelValues(d).Inc()
	}
}

// endEvents maps the final progress events to their outcome.
var endEvents = map[string]string{
	events.ProgressSucceeded: "Succeeded", events.ProgressRolledBack: "RolledBack", events.ProgressAborted: "Aborted",
	events.ProgressSuperseded: "Superseded", events.ProgressFailed: "Failed",
}

func (m *Metrics) first(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[id] {
		return false
	}
	m.seen[id] = true
	m.fifo = append(m.fifo, id)
	if len(m.fifo) > maxSeen {
		delete(m.seen, m.fifo[0])
		m.fifo = m.fifo[1:]
	}
	return true
}

var (
	runningDesc = prometheus.NewDesc("sluice_rollouts_running",
		"Rollouts running, by phase (Paused while paused), from the cluster's Rollout resources.", []string{"phase"}, nil)
	weightDesc = prometheus.NewDesc("sluice_rollout_candidate_weight_percent",
		"The share of each target's candidate Revision, in percent, from its Rollout resource.",
		[]string{"namespace", "name", "candidate", "phase"}, nil)
	endedDesc = prometheus.NewDesc("sluice_rollout_ended",
		"1 for each target whose last rollout ended, by outcome, from its Rollout resource.",
		[]string{"namespace", "name", "outcome"}, nil)
)

// stateCollector reads the Rollout resources from the writer's cache at
// each scrape.
type stateCollector struct{ w *Writer }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runningDesc
	ch <- weightDesc
	ch <- endedDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	running := map[string]int{}
	if c.w == nil {
		return // no Rollout resources: nothing to describe
	}
	if store := c.w.cache.Load(); store != nil {
		for _, item := range (*store).List() {
			u, ok := item.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			var r Rollout
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r) != nil || r.Status.Candidate == "" {
				continue
			}
			s := r.Status
			ch <- prometheus.MustNewConstMetric(weightDesc, prometheus.GaugeValue, float64(s.Weight), r.Namespace, r.Name, s.Candidate, s.Phase)
			if s.Ended {
				ch <- prometheus.MustNewConstMetric(endedDesc, prometheus.GaugeValue, 1, r.Namespace, r.Name, s.Outcome)
				continue
			}
			running[s.Phase]++
		}
	}
	for _, phase := range phases {
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(running[phase]), phase)
	}
}

// phases are the phases a running rollout shows, each reported (0 too) so
// a dashboard's series do not come and go.
var phases = []string{string(api.PhaseResolving), string(api.PhaseWaitingReady), string(api.PhaseStepping),
	string(api.PhaseHolding), string(api.PhaseGate), string(api.PhaseWaitingWave), string(api.PhaseWaveHold),
	string(api.PhasePaused), string(api.PhaseRollingBack)}
