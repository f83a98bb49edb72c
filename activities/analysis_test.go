package activities

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
