package requestsim

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/test/knativefake"
)

func TestTickSplitsRequestsByRouteStatus(t *testing.T) {
	good := knativefake.Revision("default", "hello", 1, true)
	bad := knativefake.Revision("default", "hello", 2, true)
	bad.Annotations = map[string]string{AnnotationErrorRate: "0.2", AnnotationLatency: "800ms"}
	route := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"}}
	// The fake cluster derives the Route's status from its spec.
	route.Spec.Traffic = []servingv1.TrafficTarget{knativefake.Target(good.Name, 75, ""), knativefake.Target(bad.Name, 25, "")}
	for _, r := range []*servingv1.Revision{good, bad} {
		r.Labels[serving.ServiceLabelKey] = "hello"
	}
	k := knativefake.New(good, bad, route)
	s := New(k, "default", 40, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// 40 rps for 10 s: 300 requests to the good Revision, 100 to the bad
	// one, 20 of which answer 500.
	for i := 0; i < 10; i++ {
		if err := s.Tick(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`revision_request_count{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00001",service_name="hello"} 300`,
		`revision_request_count{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00002",service_name="hello"} 80`,
		`revision_request_count{configuration_name="hello",namespace_name="default",response_code="500",response_code_class="5xx",revision_name="hello-00002",service_name="hello"} 20`,
		// 800 ms falls in the le=1000 bucket, not le=500.
		`revision_request_latencies_bucket{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00002",service_name="hello",le="500"} 0`,
		`revision_request_latencies_bucket{configuration_name="hello",namespace_name="default",response_code="200",response_code_class="2xx",revision_name="hello-00002",service_name="hello",le="1000"} 80`,
		// The same requests under the OpenTelemetry-era name, in seconds.
		`kn_serving_invocation_duration_seconds_count{http_response_status_code="500",k8s_namespace_name="default",kn_configuration_name="hello",kn_revision_name="hello-00002",kn_service_name="hello"} 20`,
		`kn_serving_invocation_duration_seconds_bucket{http_response_status_code="200",k8s_namespace_name="default",kn_configuration_name="hello",kn_revision_name="hello-00001",kn_service_name="hello",le="0.025"} 300`,
		`kn_serving_invocation_duration_seconds_bucket{http_response_status_code="200",k8s_namespace_name="default",kn_configuration_name="hello",kn_revision_name="hello-00002",kn_service_name="hello",le="0.75"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
