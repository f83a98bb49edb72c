package worker

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	k8smetrics "k8s.io/client-go/tools/metrics"

	"github.com/sluicehq/sluice/api"
)

func TestPromMetricsFitsTagsToLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newPromMetrics(reg, slog.New(slog.DiscardHandler))
	h := m.WithTags(map[string]string{"namespace": "default", "task_queue": "q"})
	h.Counter("temporal_request").Inc(2)
	// Same name, a tag missing and an extra one: fitted, not dropped.
	m.WithTags(map[string]string{"namespace": "default", "operation": "Poll"}).Counter("temporal_request").Inc(1)
	h.Gauge("temporal_num_pollers").Update(3)
	h.Timer("temporal.request.latency").Record(20 * time.Millisecond)

	want := `
# HELP temporal_request Temporal SDK counter temporal_request
# TYPE temporal_request counter
temporal_request{namespace="default",task_queue=""} 1
temporal_request{namespace="default",task_queue="q"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "temporal_request"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "temporal_num_pollers", "temporal_request_latency_seconds"); err != nil || n != 2 {
		t.Fatalf("gauge and timer series = %d, %v", n, err)
	}
}

func TestKubeMetricsRecordRateLimiterWaits(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterKubeMetrics(reg)
	k8smetrics.RateLimiterLatency.Observe(context.Background(), "PATCH", url.URL{}, 30*time.Millisecond)
	k8smetrics.RequestLatency.Observe(context.Background(), "GET", url.URL{}, 2*time.Millisecond)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			seen[f.GetName()+" "+m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	if seen["sluice_kube_rate_limiter_wait_seconds PATCH"] != 1 || seen["sluice_kube_request_duration_seconds GET"] != 1 {
		t.Fatalf("recorded: %v", seen)
	}
}

// The Temporal SDK asks its handler for a metric on every emission (each
// poll, task and request), with the tags of a worker: what one costs.
func BenchmarkTemporalMetricEmission(b *testing.B) {
	m := newPromMetrics(prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	h := m.WithTags(map[string]string{"namespace": "default", "task_queue": api.DefaultTaskQueue, "worker_type": "ActivityWorker",
		"activity_type": api.ActivityApplyTraffic, "workflow_type": api.RolloutWorkflow, "operation": "RespondActivityTaskCompleted"})
	b.ReportAllocs()
	for b.Loop() {
		h.Counter("temporal_request").Inc(1)
		h.Timer("temporal_request_latency").Record(time.Millisecond)
	}
}
