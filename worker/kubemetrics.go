package worker

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/client-go/tools/metrics"
)

// kubeLatency records one client-go latency (a request's, or its wait in
// the client-side rate limiter) by verb.
type kubeLatency struct{ hist *prometheus.HistogramVec }

func (k kubeLatency) Observe(_ context.Context, verb string, _ url.URL, d time.Duration) {
	k.hist.WithLabelValues(verb).Observe(d.Seconds())
}

// RegisterKubeMetrics exposes the Kubernetes client's request latencies and
// its waits in the client-side rate limiter (SLUICE_KUBE_QPS and
// SLUICE_KUBE_BURST) in reg: waits that grow mean the limit, not the API
// server, is what slows steps down. client-go takes these hooks once per
// process; later calls change nothing.
func RegisterKubeMetrics(reg prometheus.Registerer) {
	buckets := []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_kube_rate_limiter_wait_seconds", Help: "Time Kubernetes API requests waited in sluice's client-side rate limiter, by verb.", Buckets: buckets,
	}, []string{"verb"})
	req := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_kube_request_duration_seconds", Help: "Kubernetes API request latency as sluice's client sees it, by verb.", Buckets: buckets,
	}, []string{"verb"})
	if reg.Register(wait) != nil || reg.Register(req) != nil {
		return
	}
	k8smetrics.Register(k8smetrics.RegisterOpts{RateLimiterLatency: kubeLatency{wait}, RequestLatency: kubeLatency{req}})
}
