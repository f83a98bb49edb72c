package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/report"
)

// TestAnalysisOnRealServer runs a rollout with checks and every kind of
// webhook on a real Temporal server and worker: the check queries an
// HTTP server speaking Prometheus' query API (the real Prometheus is in the
// e2e tests), the gate answers 409 twice before 200 (without retries, so the workflow asks again each interval). Its history is the one
// replayed for analysis (rollout-analysis.json).
func TestAnalysisOnRealServer(t *testing.T) {
	var (
		mu      sync.Mutex
		queries []string
		moments []string
		gate    int
	)
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		queries = append(queries, r.Form.Get("query"))
		mu.Unlock()
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.998"]}]}}`)
	}))
	defer prom.Close()
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p analysis.Payload
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		defer mu.Unlock()
		moments = append(moments, p.Moment)
		if p.Moment == "gate" {
			if gate++; gate <= 2 {
				w.WriteHeader(http.StatusConflict)
			}
		}
	}))
	defer hooks.Close()
	doc := fmt.Sprintf(`
interval: 1s
prometheus: %s
checks:
  - name: success-rate
    builtin: success-rate
webhooks:
  - {name: warmup, at: before-start, url: %[2]s}
  - {name: smoke, at: hold, url: %[2]s}
  - {name: approve, at: gate, url: %[2]s, retries: 0}
  - {name: notify, at: after-end, url: %[2]s}
`, prom.URL, hooks.URL)
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "3s", config.AnnotationAnalysis: doc})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v, %v", res, err)
	}
	st := s.status()
	tl := st.Analysis.Tallies
	if len(tl) != 2 || tl[0].Passed < 2 || tl[0].Failures+tl[0].Errors+tl[0].Inconclusives != 0 || tl[1].Name != "smoke" || tl[1].Passed != tl[0].Passed {
		t.Fatalf("tallies %+v", tl)
	}
	mu.Lock()
	defer mu.Unlock()
	want := `rate(kn_serving_invocation_duration_seconds_count{http_response_status_code=~"5.."}[60s]) * on (job, instance) group_left () max by (job, instance) (target_info{k8s_namespace_name="default",kn_revision_name="hello-00002"})`
	if len(queries) != tl[0].Measured || !strings.Contains(queries[0], want) {
		t.Fatalf("%d queries for %d measurements; first %q", len(queries), tl[0].Measured, queries[0])
	}
	got := strings.Join(moments, ",")
	if !strings.HasPrefix(got, "before-start,hold,") || !strings.HasSuffix(got, ",hold,gate,gate,gate,after-end") {
		t.Fatalf("webhook moments: %s", got)
	}
	recordHistory(t, s.temporal, "rollout-analysis.json")
}

// TestComparisonOnRealServer runs comparison checks on a real Temporal
// server and worker against an HTTP server speaking Prometheus' range-query
// API: the candidate's latency samples are 30% above the stable's, so the
// first round scores 50 and the rollout rolls back. Its history is the one
// replayed for comparisons (rollout-compare.json).
func TestComparisonOnRealServer(t *testing.T) {
	var (
		mu     sync.Mutex
		ranges int
	)
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		q := r.Form.Get("query")
		mu.Lock()
		if r.URL.Path == "/api/v1/query_range" {
			ranges++
		}
		mu.Unlock()
		var vals []string
		for i := range 12 {
			v := 1.0 // success rate
			if strings.Contains(q, "_sum") {
				v = 100 + float64(i%4)
				if strings.Contains(q, "hello-00002") {
					v *= 1.3
				}
			}
			vals = append(vals, fmt.Sprintf(`[%d,"%g"]`, 1000+i, v))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[%s]}]}}`, strings.Join(vals, ","))
	}))
	defer prom.Close()
	doc := fmt.Sprintf(`
interval: 1s
prometheus: %s
checks:
  - {name: latency, builtin: latency-mean, compare: true}
  - {name: errors, builtin: success-rate, compare: true, critical: true}
`, prom.URL)
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "3s", config.AnnotationAnalysis: doc})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "analysis: the comparison score failed: score 50 Failed (pass ≥ 95, marginal ≥ 75): failed: latency") {
		t.Fatalf("result %+v, %v", res, err)
	}
	tl := s.status().Analysis.Tallies
	if len(tl) != 3 || tl[0].Failures != 1 || tl[1].Passed != 1 || tl[2].Kind != analysis.KindScore || tl[2].Failures != 1 {
		t.Fatalf("tallies %+v", tl)
	}
	if c := tl[0].Last.Compare; c == nil || c.Candidate.Count != 12 || c.Stable.Count != 12 || c.Shift < 25 {
		t.Fatalf("latency comparison %+v", tl[0].Last)
	}
	mu.Lock()
	defer mu.Unlock()
	if ranges != 4 {
		t.Fatalf("%d range queries, want 4 (two checks, two sides, one round)", ranges)
	}
	// The history holds the round, in policy order, and the report made
	// from it scores it as the workflow did.
	rounds, err := s.ctl.Rounds(ctx, hello, "hello-00002")
	if err != nil || len(rounds) != 1 || len(rounds[0].Measurements) != 2 || rounds[0].Measurements[0].Name != "latency" || rounds[0].Measurements[1].Name != "errors" {
		t.Fatalf("rounds %+v, %v", rounds, err)
	}
	var page strings.Builder
	if err := report.Render(&page, report.Input{Status: s.status(), Rounds: rounds, Generated: time.Now()}); err != nil || !strings.Contains(page.String(), "score 50 Failed") {
		t.Fatalf("report: %v", err)
	}
	recordHistory(t, s.temporal, "rollout-compare.json")
}
