package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func f(v float64) *float64 { return &v }

func TestEvaluate(t *testing.T) {
	tests := []struct {
		value, min, max *float64
		want            Result
	}{
		{f(0.995), f(0.99), nil, Passed},
		{f(0.99), f(0.99), nil, Passed}, // bounds are inclusive
		{f(0.8), f(0.99), nil, Failed},
		{f(600), nil, f(500), Failed},
		{f(-1), f(0), f(1), Failed},
		{f(0.5), f(0), f(1), Passed},
		{nil, f(0), nil, Inconclusive},
		{f(math.NaN()), f(0), nil, Inconclusive},
	}
	for i, tt := range tests {
		if got := Evaluate(tt.value, tt.min, tt.max); got != tt.want {
			t.Errorf("%d: Evaluate = %s, want %s", i, got, tt.want)
		}
	}
	if got := Range(f(0.99), nil); got != "[0.99, ∞]" {
		t.Errorf("Range = %q", got)
	}
}

func TestJudgeLimits(t *testing.T) {
	rate := Tally{Name: "success-rate", Limits: Limits{Failure: 1, ConsecutiveError: 2}}
	hook := Tally{Name: "smoke", Limits: Limits{}}
	record := func(t *Tally, rs ...Result) {
		for _, r := range rs {
			t.Record(Measurement{Name: t.Name, Result: r, Message: "m-" + string(r)})
		}
	}
	record(&rate, Failed, Passed)
	if d := Judge([]Tally{rate, hook}, false); d.Action != Continue {
		t.Fatalf("one failure under limit 1: %+v", d)
	}
	record(&rate, Error, Error)
	if d := Judge([]Tally{rate}, false); d.Action != Continue {
		t.Fatalf("two errors under limit 2: %+v", d)
	}
	record(&rate, Error)
	d := Judge([]Tally{rate}, false)
	if d.Action != Pause || !strings.Contains(d.Reason, "could not be measured 3 times in a row (consecutive error limit 2): m-Error") {
		t.Fatalf("third error: %+v", d)
	}
	rate.Forgive()
	record(&rate, Error, Passed, Error, Error)
	if d := Judge([]Tally{rate}, false); d.Action != Continue || rate.ConsecutiveErrors != 2 || rate.Errors != 6 {
		t.Fatalf("a pass ends the run of errors: %+v %+v", d, rate)
	}
	// Rollback wins over pause, whatever the order.
	record(&hook, Inconclusive)
	record(&rate, Failed)
	d = Judge([]Tally{hook, rate}, false)
	if d.Action != Rollback || !strings.Contains(d.Reason, "success-rate failed 2 times (failure limit 1)") {
		t.Fatalf("rollback over pause: %+v", d)
	}
	d = Judge([]Tally{hook}, false)
	if d.Action != Pause || !strings.Contains(d.Reason, "smoke had no data (inconclusive limit 0): m-Inconclusive") {
		t.Fatalf("inconclusive: %+v", d)
	}
	// The inconclusive limit counts a run: data in between starts it over.
	data := Tally{Name: "p99", Limits: Limits{Inconclusive: 1}}
	record(&data, Inconclusive, Passed, Inconclusive, Passed)
	if d := Judge([]Tally{data}, false); d.Action != Continue || data.Inconclusives != 2 {
		t.Fatalf("separate rounds without data: %+v %+v", d, data)
	}
	record(&data, Inconclusive, Inconclusive)
	if d := Judge([]Tally{data}, false); d.Action != Pause || !strings.Contains(d.Reason, "p99 had no data 2 times in a row (inconclusive limit 1)") {
		t.Fatalf("two in a row: %+v", d)
	}
}

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
	var last Payload
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
	p := Payload{Name: "smoke", Moment: "hold", ID: "r-1", Rollout: RolloutInfo{Namespace: "ns", Name: "hello", Candidate: "hello-00002", Weight: 10}, Metadata: map[string]string{"k": "v"}}
	m := w.Call(context.Background(), Hook{URL: srv.URL, Timeout: time.Second, Retries: 1}, p)
	if m.Result != Failed || m.Attempts != 2 || m.StatusCode != 503 || !strings.Contains(m.Message, "HTTP 503: not yet") {
		t.Fatalf("after 2 attempts: %+v", m)
	}
	m = w.Call(context.Background(), Hook{URL: srv.URL, Timeout: time.Second, Retries: 0}, p)
	if m.Result != Passed || m.StatusCode != 200 || m.Message != "ok" {
		t.Fatalf("third call: %+v", m)
	}
	if last.ID != "r-1" || last.Rollout.Candidate != "hello-00002" || last.Metadata["k"] != "v" || last.Moment != "hold" {
		t.Fatalf("payload = %+v", last)
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(200 * time.Millisecond) }))
	defer slow.Close()
	m = w.Call(context.Background(), Hook{URL: slow.URL, Timeout: 20 * time.Millisecond}, p)
	if m.Result != Failed || m.StatusCode != 0 || !strings.Contains(m.Message, "deadline exceeded") {
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
