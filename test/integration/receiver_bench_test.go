package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicehq/sluice/test/knativefake"
)

// BenchmarkEventToWorkflowStart measures the receiver's latency from a new
// Revision's event to its answer, which it gives only once Temporal has
// started the rollout: one SignalWorkflow (finding no rollout), one
// DescribeWorkflowExecution and one SignalWithStartWorkflow against the
// real dev server, plus the cluster reads. Each iteration is a new Revision
// of its own Service. Run it with `make bench-events` (1,000 events).
func BenchmarkEventToWorkflowStart(b *testing.B) {
	s := startStack(b)
	url := s.startReceiver(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := fmt.Sprintf("svc%d", i)
		svc := knativefake.Service(ns, name, nil, knativefake.Target(name+"-00001", 100, ""))
		svc.Status.LatestCreatedRevisionName = name + "-00002"
		for _, o := range []runtime.Object{svc, knativefake.Revision(ns, name, 1, true), knativefake.Revision(ns, name, 2, false)} {
			if err := s.k.Tracker().Add(o); err != nil {
				b.Fatal(err)
			}
		}
		body := fmt.Sprintf(`{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"%s-00002","namespace":"default","labels":{"serving.knative.dev/configuration":"%s","serving.knative.dev/service":"%s"}}}`, name, name, name)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", name)
		req.Header.Set("Ce-Source", "bench")
		req.Header.Set("Ce-Type", "dev.knative.apiserver.resource.add")
		req.Header.Set("Content-Type", "application/json")
		b.StartTimer()
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("event %d: status %d", i, resp.StatusCode)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
