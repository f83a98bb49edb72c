package requestsim

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/test/knativefake"
)

func TestRecordSplitsRequestsByRouteStatus(t *testing.T) {
	good := knativefake.Revision("default", "hello", 1, true)
	bad := knativefake.Revision("default", "hello", 2, true)
	bad.Annotations = map[string]string{AnnotationLatency: "800ms"}
	route := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"}}
	route.Status.Traffic = []servingv1.TrafficTarget{knativefake.Target(good.Name, 75, ""), knativefake.Target(bad.Name, 25, "")}
	s := New(nil, "default", 40, nil, slog.New(slog.DiscardHandler))
	// Only the candidate runs real queue-proxies, two pods of it.
	s.SetTargets(bad.Name, []string{"10.244.0.7:8012", "10.244.0.8:8012"})
	// 40 rps at 25% for 10 ticks of 0.15 s: 15 requests, the fractions
	// carried from tick to tick, sent to the two pods in turn.
	var sent []string
	for range 10 {
		sent = append(sent, s.record([]*servingv1.Revision{good, bad}, []*servingv1.Route{route}, 150*time.Millisecond)...)
	}
	if len(sent) != 15 {
		t.Fatalf("sent %d requests, want 15: %v", len(sent), sent)
	}
	per := map[string]int{}
	for _, a := range sent {
		per[a]++
	}
	if per["10.244.0.7:8012"] != 8 || per["10.244.0.8:8012"] != 7 {
		t.Fatalf("requests per pod: %v", per)
	}
	// The stand-in's load covers both Revisions, real queue-proxies or not.
	if l := s.load[good.Name]; l.rps != 30 || l.latency != DefaultLatency {
		t.Fatalf("load of the stable Revision: %+v", l)
	}
	if l := s.load[bad.Name]; l.rps != 10 || l.latency != 800*time.Millisecond {
		t.Fatalf("load of the candidate: %+v", l)
	}
	// A Route may ask for a rate of its own: 2 rps at 25% for 4 s is 2.
	route.Annotations = map[string]string{AnnotationRate: "2"}
	if sent := s.record([]*servingv1.Revision{good, bad}, []*servingv1.Route{route}, 4*time.Second); len(sent) != 2 || s.load[good.Name].rps != 1.5 {
		t.Fatalf("at the Route's own rate: sent %v, load %+v", sent, s.load)
	}
}

func TestAppAnswersAsAnnotated(t *testing.T) {
	app := &App{Behaviour: BehaviourOf(map[string]string{AnnotationErrorRate: "0.2", AnnotationLatency: "5ms"})}
	srv := httptest.NewServer(app)
	defer srv.Close()
	failed := 0
	start := time.Now()
	for range 50 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusInternalServerError {
			failed++
		}
	}
	if failed != 10 {
		t.Fatalf("%d of 50 answered 500, want 10", failed)
	}
	if took := time.Since(start); took < 50*5*time.Millisecond {
		t.Fatalf("50 requests took %s: the latency was not applied", took)
	}
	if b := BehaviourOf(map[string]string{AnnotationErrorRate: "2", AnnotationLatency: "-1s"}); b != (Behaviour{Latency: DefaultLatency}) {
		t.Fatalf("unreadable annotations gave %+v", b)
	}
}
