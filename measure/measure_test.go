package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
)

func TestPrometheusQuery(t *testing.T) {
	answers := map[string]string{
		"one":    `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"0.75"]}]}}`,
		"empty":  `{"status":"success","data":{"resultType":"vector","result":[]}}`,
		"nan":    `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}`,
		"scalar": `{"status":"success","data":{"resultType":"scalar","result":[1,"42"]}}`,
		"two":    `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}`,
		"bad":    `{"status":"error","errorType":"bad_data","error":"parse error at char 5"}`,
		"matrix": `{"status":"success","data":{"resultType":"matrix","result":[]}}`,
	}
	var gotTime string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prom/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		gotTime = r.Form.Get("time")
		a, ok := answers[r.Form.Get("query")]
		if !ok {
			http.Error(w, "no", http.StatusBadGateway)
			return
		}
		if strings.Contains(a, `"error"`) {
			w.WriteHeader(http.StatusBadRequest)
		}
		fmt.Fprint(w, a)
	}))
	defer srv.Close()
	p := Prometheus{HTTP: srv.Client()}
	at := time.Unix(1700000000, 500e6)
	ctx := context.Background()
	v, err := p.Query(ctx, srv.URL+"/prom/", "one", at)
	if err != nil || v == nil || *v != 0.75 || gotTime != "1700000000.500" {
		t.Fatalf("one: %v %v time %q", v, err, gotTime)
	}
	for _, q := range []string{"empty", "nan"} {
		if v, err := p.Query(ctx, srv.URL+"/prom", q, at); err != nil || v != nil {
			t.Fatalf("%s: want no data, got %v %v", q, v, err)
		}
	}
	if v, err := p.Query(ctx, srv.URL+"/prom", "scalar", at); err != nil || *v != 42 {
		t.Fatalf("scalar: %v %v", v, err)
	}
	for q, want := range map[string]string{
		"two":     "returned 2 series; aggregate it to one",
		"bad":     "Prometheus rejected the query (bad_data): parse error at char 5",
		"matrix":  "returned a matrix",
		"missing": "answered HTTP 502 with no API response",
	} {
		if _, err := p.Query(ctx, srv.URL+"/prom", q, at); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", q, err, want)
		}
	}
	srv.Close()
	if _, err := p.Query(ctx, srv.URL, "one", at); err == nil || !strings.Contains(err.Error(), "query Prometheus at") {
		t.Fatalf("closed server: %v", err)
	}
}

func TestWebhookRetriesAndPayload(t *testing.T) {
	var calls atomic.Int32
	var last analysis.Payload
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
		_ = json.NewDecoder(r.Body).Decode(&last)
		if n < 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	w := Webhooks{HTTP: srv.Client(), Backoff: time.Millisecond}
	p := analysis.Payload{Name: "smoke", Moment: "hold", ID: "r-1", Rollout: analysis.RolloutInfo{Namespace: "ns", Name: "hello", Candidate: "hello-00002", Weight: 10}, Metadata: map[string]string{"k": "v"}}
	m := w.Call(context.Background(), Hook{URL: srv.URL, Timeout: time.Second, Retries: 1}, p)
	if m.Result != analysis.Failed || m.Attempts != 2 || m.StatusCode != 503 || !strings.Contains(m.Message, "HTTP 503: not yet") {
		t.Fatalf("after 2 attempts: %+v", m)
	}
	m = w.Call(context.Background(), Hook{URL: srv.URL, Timeout: time.Second, Retries: 0}, p)
	if m.Result != analysis.Passed || m.StatusCode != 200 || m.Message != "ok" {
		t.Fatalf("third call: %+v", m)
	}
	if last.ID != "r-1" || last.Rollout.Candidate != "hello-00002" || last.Metadata["k"] != "v" || last.Moment != "hold" {
		t.Fatalf("payload = %+v", last)
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(200 * time.Millisecond) }))
	defer slow.Close()
	m = w.Call(context.Background(), Hook{URL: slow.URL, Timeout: 20 * time.Millisecond}, p)
	if m.Result != analysis.Failed || m.StatusCode != 0 || !strings.Contains(m.Message, "deadline exceeded") {
		t.Fatalf("timeout: %+v", m)
	}
}

// A stand-in for Prometheus's query_range API, for the unit test below.
func TestPrometheusQueryRange(t *testing.T) {
	answers := map[string]string{
		"series": `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"10"],[2,"NaN"],[3,"12.5"]]}]}}`,
		"none":   `{"status":"success","data":{"resultType":"matrix","result":[]}}`,
		"two":    `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"1"},"values":[]},{"metric":{"a":"2"},"values":[]}]}}`,
	}
	var form map[string][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query_range" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		form = r.Form
		fmt.Fprint(w, answers[r.Form.Get("query")])
	}))
	defer srv.Close()
	p := Prometheus{HTTP: srv.Client()}
	ctx := context.Background()
	start := time.Unix(1700000000, 0)
	got, err := p.QueryRange(ctx, srv.URL, "series", start, start.Add(time.Minute), 5*time.Second)
	if err != nil || len(got) != 2 || got[0] != 10 || got[1] != 12.5 {
		t.Fatalf("series: %v %v", got, err)
	}
	if form["start"][0] != "1700000000.000" || form["end"][0] != "1700000060.000" || form["step"][0] != "5.000" {
		t.Fatalf("form %v", form)
	}
	if got, err := p.QueryRange(ctx, srv.URL, "none", start, start.Add(time.Minute), time.Second); err != nil || len(got) != 0 {
		t.Fatalf("none: %v %v", got, err)
	}
	if _, err := p.QueryRange(ctx, srv.URL, "two", start, start.Add(time.Minute), time.Second); err == nil || !strings.Contains(err.Error(), "returned 2 series") {
		t.Fatalf("two: %v", err)
	}
	if _, err := p.QueryRange(ctx, srv.URL, "series", start, start, time.Second); err == nil {
		t.Fatal("an empty range: no error")
	}
}
