package integration

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// BenchmarkEventToWorkflowStart measures the receiver's latency from a new
// Revision's event to its answer, which it gives only once Temporal has
// started the rollout: one signal-with-start against the real dev server,
// and the target read from the receiver's informers' caches (as `sluice
// receiver` runs). Each iteration is a new Revision of its own Service.
func BenchmarkEventToWorkflowStart(b *testing.B) {
	s := startStack(b)
	url, cache := s.startCachedReceiver(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		body := addService(b, s, cache, fmt.Sprintf("svc%d", i), nil)
		b.StartTimer()
		lat = append(lat, post(b, url, body, fmt.Sprint("start-", i), http.StatusAccepted))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkIrrelevantEvent measures the answer to an event about a
// Revision of a Service that did not opt in — most of what ApiServerSource
// sends — which the receiver gives from its caches with no call at all.
func BenchmarkIrrelevantEvent(b *testing.B) {
	s := startStack(b)
	url, cache := s.startCachedReceiver(b)
	bodies := make([]string, 100)
	for i := range bodies {
		bodies[i] = addService(b, s, cache, fmt.Sprintf("off%d", i), map[string]string{"sluice.dev/rollout": "disabled"})
	}
	calls := len(s.k.Actions())
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lat = append(lat, post(b, url, bodies[i%len(bodies)], fmt.Sprint("irrelevant-", i), http.StatusOK))
	}
	b.StopTimer()
	if n := len(s.k.Actions()) - calls; n != 0 {
		b.Fatalf("%d API calls for events about Services that did not opt in", n)
	}
	reportLatency(b, lat)
	// And as the receiver's own histogram says: the bucket its p99 is in.
	b.ReportMetric(histogramP99(b, s.receiverMetrics, "sluice_receiver_event_duration_seconds")*1000, "receiver-p99-le-ms")
}

// histogramP99 is the upper bound of the bucket that holds the 99th
// percentile of a histogram's observations, over all its series.
func histogramP99(b *testing.B, reg *prometheus.Registry, name string) float64 {
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	counts := map[float64]uint64{}
	var total uint64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			total += h.GetSampleCount()
			for _, bk := range h.GetBucket() {
				counts[bk.GetUpperBound()] += bk.GetCumulativeCount()
			}
		}
	}
	bounds := make([]float64, 0, len(counts))
	for ub := range counts {
		bounds = append(bounds, ub)
	}
	slices.Sort(bounds)
	for _, ub := range bounds {
		if counts[ub]*100 >= total*99 {
			return ub
		}
	}
	return math.Inf(1)
}

// addService adds a Service served by its first Revision, whose second
// Revision is new, waits until the receiver's caches have it, and returns
// that Revision's Resource-mode event body.
func addService(b *testing.B, s *stack, cache *knative.TargetCache, name string, ann map[string]string) string {
	b.Helper()
	svc := knativefake.Service(ns, name, ann, knativefake.Target(name+"-00001", 100, ""))
	svc.Status.LatestCreatedRevisionName = name + "-00002"
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 2}}
	for _, o := range []runtime.Object{svc, cfg, knativefake.Revision(ns, name, 1, true), knativefake.Revision(ns, name, 2, false)} {
		if err := s.k.Tracker().Add(o); err != nil {
			b.Fatal(err)
		}
	}
	ref := knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: name}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, cached, _ := cache.ReadTarget(context.Background(), ref, 2); cached {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the receiver's caches did not see %s in 10s", name)
		}
	}
	return fmt.Sprintf(`{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"%s-00002","namespace":"default","labels":{"serving.knative.dev/configuration":"%s","serving.knative.dev/service":"%s","serving.knative.dev/configurationGeneration":"2"}}}`, name, name, name)
}

// post delivers a Resource-mode Revision event and returns how long the
// answer took.
func post(b *testing.B, url, body, id string, want int) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", id)
	req.Header.Set("Ce-Source", "bench")
	req.Header.Set("Ce-Type", "dev.knative.apiserver.resource.update")
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		b.Fatalf("event %s: status %d, want %d", id, resp.StatusCode, want)
	}
	return took
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
