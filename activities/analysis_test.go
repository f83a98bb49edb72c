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
)

func TestMeasureCheckRendersQueriesAndJudges(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = r.Form.Get("query")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"612.5"]}]}}`)
	}))
	defer srv.Close()
	a := &Activities{Prometheus: analysis.Prometheus{HTTP: srv.Client()}}
	max := 500.0
	in := CheckInput{
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
	acts := &Activities{Webhooks: analysis.Webhooks{HTTP: srv.Client()}}
	env.RegisterActivity(acts)
	v, err := env.ExecuteActivity(acts.CallWebhook, WebhookInput{
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
	a := &Activities{Prometheus: analysis.Prometheus{HTTP: srv.Client()}}
	in := CheckInput{Check: pol.Analysis.Checks[0], Prometheus: srv.URL, Vars: config.TemplateVars{Namespace: "shop", Candidate: "cart-00002"}}
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
