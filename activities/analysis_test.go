package activities

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/measure"
)

func TestMeasureCheckRendersQueriesAndJudges(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = r.Form.Get("query")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"612.5"]}]}}`)
	}))
	defer srv.Close()
	a := &Activities{Measure: measure.Measurer{Prometheus: measure.Prometheus{HTTP: srv.Client()}}}
	max := 500.0
	in := measure.CheckInput{
		Check:      config.Check{Name: "p99", Query: `histogram_quantile(0.99, rate(x{rev="{{.Candidate}}"}[{{.Window}}]))`, Max: &max, Window: 2 * time.Minute},
		Prometheus: srv.URL, Vars: config.TemplateVars{Candidate: "hello-00002", Weight: 25}, Step: 1,
	}
	m, err := a.MeasureCheck(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got != `histogram_quantile(0.99, rate(x{rev="hello-00002"}[120s]))` {
		t.Fatalf("query sent: %s", got)
	}
	if m.Result != analysis.Failed || m.Value == nil || *m.Value != 612.5 || m.Step != 1 || m.Weight != 25 || m.At.IsZero() {
		t.Fatalf("measurement = %+v", m)
	}
	srv.Close()
	m, err = a.MeasureCheck(context.Background(), in)
	if err != nil || m.Result != analysis.Error || !strings.Contains(m.Message, "query Prometheus at") {
		t.Fatalf("unreachable: %+v, %v", m, err)
	}
}

// A slow webhook call heartbeats, so a lost worker is noticed in seconds.
func TestCallWebhookHeartbeats(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(HeartbeatEvery + 500*time.Millisecond)
	}))
	defer srv.Close()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	var beats atomic.Int32
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats.Add(1) })
	acts := &Activities{Measure: measure.Measurer{Webhooks: measure.Webhooks{HTTP: srv.Client()}}}
	env.RegisterActivity(acts)
	v, err := env.ExecuteActivity(acts.CallWebhook, measure.WebhookInput{
		Hook:    config.Webhook{Name: "slow", At: config.MomentHold, URL: srv.URL, Timeout: 10 * time.Second},
		Payload: analysis.Payload{Name: "slow", Moment: "hold"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var m analysis.Measurement
	if err := v.Get(&m); err != nil || m.Result != analysis.Passed {
		t.Fatalf("measurement %+v, %v", m, err)
	}
	if beats.Load() < 1 {
		t.Fatal("no heartbeat during a call longer than HeartbeatEvery")
	}
}

// A built-in that finds no data says whether Prometheus holds any series
// of the candidate at all.
func TestMeasureCheckExplainsNoData(t *testing.T) {
	var series string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		result := `[]`
		if strings.HasPrefix(r.Form.Get("query"), "count(") && series != "" {
			result = `[{"metric":{},"value":[1,"` + series + `"]}]`
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":`+result+`}}`)
	}))
	defer srv.Close()
	d := config.BuiltinDefaults()
	d.PrometheusURL = srv.URL
	pol, err := config.FromAnnotations(map[string]string{config.AnnotationAnalysis: "checks:\n- {name: ok, builtin: success-rate}"}, d)
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Measure: measure.Measurer{Prometheus: measure.Prometheus{HTTP: srv.Client()}}}
	in := measure.CheckInput{Check: pol.Analysis.Checks[0], Prometheus: srv.URL, Vars: config.TemplateVars{Namespace: "shop", Candidate: "cart-00002"}}
	m, err := a.MeasureCheck(context.Background(), in)
	if err != nil || m.Result != analysis.Inconclusive ||
		!strings.Contains(m.Message, "no series of kn_serving_invocation_duration_seconds for revision cart-00002 in namespace shop") ||
		!strings.Contains(m.Message, "port 9091") || !strings.Contains(m.Message, "docs/analysis.md") {
		t.Fatalf("nothing scraped: %+v, %v", m, err)
	}
	series = "2"
	m, err = a.MeasureCheck(context.Background(), in)
	if err != nil || m.Result != analysis.Inconclusive || !strings.Contains(m.Message, "revision cart-00002's queue-proxies are scraped (2 series) but served no requests in the last 60s") {
		t.Fatalf("no requests: %+v, %v", m, err)
	}
}

// A comparison samples the same query for both Revisions over the same
// window at the same step, and judges the candidate's samples against the
// stable's.
func TestMeasureCheckComparesCandidateWithStable(t *testing.T) {
	var forms []map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		forms = append(forms, map[string]string{"path": r.URL.Path, "query": r.Form.Get("query"), "start": r.Form.Get("start"), "end": r.Form.Get("end"), "step": r.Form.Get("step")})
		base := 100.0
		if strings.Contains(r.Form.Get("query"), "cart-00002") {
			base = 130 // the candidate is 30% slower
		}
		var vals []string
		for i := range 10 {
			vals = append(vals, fmt.Sprintf(`[%d,"%g"]`, 1000+10*i, base+float64(i%3)))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[%s]}]}}`, strings.Join(vals, ","))
	}))
	defer srv.Close()
	a := &Activities{Measure: measure.Measurer{Prometheus: measure.Prometheus{HTTP: srv.Client()}}}
	c := config.Check{Name: "latency", Query: `avg(x{rev="{{.Revision}}"}[{{.Window}}])`, Window: 90 * time.Second, Step: 10 * time.Second,
		Compare: &analysis.Comparison{Direction: analysis.Increase, Effect: analysis.Effect{Value: 10, Relative: true}, Confidence: 0.95, MinSamples: 8}}
	in := measure.CheckInput{Check: c, Prometheus: srv.URL, Vars: config.TemplateVars{Namespace: "shop", Candidate: "cart-00002", Stable: "cart-00001", Weight: 20}, Step: 2}
	m, err := a.MeasureCheck(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(forms) != 2 || forms[0]["query"] != `avg(x{rev="cart-00002"}[10s])` || forms[1]["query"] != `avg(x{rev="cart-00001"}[10s])` {
		t.Fatalf("queries sent: %v", forms)
	}
	if forms[0]["path"] != "/api/v1/query_range" || forms[0]["start"] != forms[1]["start"] || forms[0]["end"] != forms[1]["end"] || forms[0]["step"] != "10.000" {
		t.Fatalf("the two sides were not sampled over the same window: %v", forms)
	}
	cmp := m.Compare
	if m.Kind != analysis.KindCompare || m.Result != analysis.Failed || cmp == nil || cmp.Candidate.Count != 10 || cmp.Stable.Count != 10 ||
		cmp.Shift != 30 || cmp.Allowed != 10.1 || m.Value == nil || *m.Value != 30 {
		t.Fatalf("measurement = %+v, compare %+v", m, cmp)
	}
	// Without a stable there is nothing to compare with.
	in.Vars.Stable = ""
	if m, _ := a.MeasureCheck(context.Background(), in); m.Result != analysis.Inconclusive || !strings.Contains(m.Message, "no stable Revision") {
		t.Fatalf("no stable: %+v", m)
	}
}
