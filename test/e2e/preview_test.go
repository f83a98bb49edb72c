package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/test/ingress"
)

// A preview on Knative: the Ready candidate gets the tag canary at 0%, and
// the before-start smoke webhook, given its URL and header, sends requests
// through the ingress's data path (routed as the KIngress Knative
// programmed says, tag-header-based-routing on). By the tag's URL, or with
// the header, they reach the candidate's real queue-proxy; without it, the
// stable's. p1's smoke passes: the steps run and the tag is gone at the
// end. p2's fails: the candidate never gets a share, the tag is removed,
// and Prometheus — scraping the queue-proxies — counts exactly the
// smoke's tagged requests at the candidate's.
func TestPreviewOnKnative(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	var mu sync.Mutex
	routed := map[string][]string{} // by candidate: "how=Revision" per request of the last call
	reached := map[string]int{}     // by candidate: requests its queue-proxy answered, over every call
	hooks := newHookServer(t, func(p analysis.Payload) int {
		if p.Moment != "before-start" || p.Preview == nil {
			return http.StatusOK // a first Revision has no preview; its routes are checked below
		}
		got, n := smoke(p)
		mu.Lock()
		// A failing hook is called again (its retries): each call's
		// requests count.
		routed[p.Rollout.Candidate] = got
		reached[p.Rollout.Candidate] += n
		mu.Unlock()
		if p.Rollout.Name == "p2" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	policy := map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s", config.AnnotationPreview: "canary",
		"sluice.dev/analysis": "webhooks:\n  - {name: smoke, at: before-start, timeout: 60s, url: " + hooks.URL + "/smoke}\n"}
	for _, name := range []string{"p1", "p2"} {
		firstRollout(t, c, name, policy)
		deploy(t, name, "example.com/"+name+":v2", nil, nil)
	}

	st := waitOutcome(t, c, svcTarget("p1"), "p1-00002", 90*time.Second)
	if st.Outcome != api.OutcomeSucceeded || st.Preview == nil || !strings.HasPrefix(st.Preview.URL, "http://canary-p1.") {
		t.Fatalf("p1: %s (%s), preview %+v", st.Outcome, st.Reason, st.Preview)
	}
	if got := serviceTraffic(t, "p1"); got != "p1-00002=100%" {
		t.Errorf("p1 at the end: %s, want the tag gone", got)
	}
	st = waitOutcome(t, c, svcTarget("p2"), "p2-00002", 90*time.Second)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "before-start webhook smoke") || !st.Steps[0].StartedAt.IsZero() {
		t.Fatalf("p2: %s (%s), first step started %s", st.Outcome, st.Reason, st.Steps[0].StartedAt)
	}
	if got := serviceTraffic(t, "p2"); got != "p2-00001=100%" {
		t.Errorf("p2 after its failed preview: %s, want the tag gone", got)
	}
	if w := shares(t, stk.AuditLog, "p2", "p2-00002", time.Time{}); len(w) != 0 {
		t.Errorf("p2-00002 was given a share: %+v", w)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"p1", "p2"} {
		cand, stable := name+"-00002", name+"-00001"
		want := "probe=" + cand + " (200)," + strings.Repeat("tag URL="+cand+",", 5) + strings.Repeat("header="+cand+",", 5) + strings.Repeat("no header="+stable+",", 5)
		if got := strings.Join(routed[cand], ",") + ","; got != want {
			t.Errorf("%s's smoke requests went to\n%s\nwant\n%s", name, got, want)
		}
	}
	// Only the smoke's tagged requests (with the probes its queue-proxy
	// answered while it started) ever reached p2-00002's queue-proxy.
	want := float64(reached["p2-00002"])
	if n := promValue(t, `sum(kn_serving_invocation_duration_seconds_count * on (job, instance) group_left () max by (job, instance) (target_info{kn_revision_name="p2-00002"}))`, want); n != want {
		t.Errorf("p2-00002's queue-proxy counted %g requests, want the %g the smoke sent it", n, want)
	}
}

// smoke is the before-start webhook's own work: five requests by the
// tag's URL, five by the Service's URL with the tag header, five without,
// each through the ingress, after probing by the tag's URL until the
// candidate's queue-proxy answers 200. It lists "how=Revision" for each
// request but the probes, and counts those the candidate's queue-proxy
// answered, probes included.
func smoke(p analysis.Payload) (routes []string, reached int) {
	tagURL, _ := url.Parse(p.Preview.URL)
	svc := strings.TrimPrefix(tagURL.Host, p.Preview.Tag+"-")
	send := func(host string, header map[string]string) (string, int) {
		rev, code := throughIngress(host, header)
		if rev == p.Rollout.Candidate {
			reached++
		}
		return rev, code
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rev, code := send(tagURL.Host, nil)
		if code == http.StatusOK || time.Now().After(deadline) {
			routes = append(routes, fmt.Sprintf("probe=%s (%d)", rev, code))
			break
		}
	}
	for _, c := range []struct {
		how, host string
		header    map[string]string
	}{{"tag URL", tagURL.Host, nil}, {"header", svc, p.Preview.Header}, {"no header", svc, nil}} {
		for range 5 {
			rev, code := send(c.host, c.header)
			routes = append(routes, fmt.Sprintf("%s=%s", c.how, rev))
			if code != http.StatusOK {
				routes[len(routes)-1] += fmt.Sprintf(" (%d)", code)
			}
		}
	}
	return routes, reached
}

// throughIngress sends a request to host with header through the
// ingress's data path, and says which Revision's queue-proxy answered.
func throughIngress(host string, header map[string]string) (revision string, code int) {
	req, _ := http.NewRequest(http.MethodGet, stk.RouterURL+"/", nil)
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error(), 0
	}
	resp.Body.Close()
	return resp.Header.Get(ingress.HeaderRoutedTo), resp.StatusCode
}

// promValue queries the stack's Prometheus until the value is want, or
// 20 s passed, and returns the last value.
func promValue(t *testing.T, query string, want float64) float64 {
	t.Helper()
	var last float64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(stk.PrometheusURL + "/api/v1/query?query=" + url.QueryEscape(query))
		if err == nil {
			var body struct {
				Data struct {
					Result []struct {
						Value [2]any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if len(body.Data.Result) == 1 {
				fmt.Sscan(fmt.Sprint(body.Data.Result[0].Value[1]), &last)
				if last == want {
					return last
				}
			}
		}
		time.Sleep(time.Second)
	}
	return last
}

// sluice.dev/preview-hold on Knative: the preview holds at 0% while a
// success-rate check on Prometheus — scraping the candidate's real
// queue-proxy — judges the requests a load webhook sends to the tag's URL;
// it passes there, before the candidate has any share. The hold gives
// Prometheus (scraping every second) time to have the new series on a busy
// machine: in a 6-s hold, every round of one CI run was inconclusive.
func TestPreviewHoldOnKnative(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	var loaded atomic.Int64
	hooks := newHookServer(t, func(p analysis.Payload) int {
		if p.Preview != nil && p.Rollout.Weight == 0 {
			u, _ := url.Parse(p.Preview.URL)
			for range 5 {
				if rev, code := throughIngress(u.Host, nil); rev == p.Rollout.Candidate && code == http.StatusOK {
					loaded.Add(1)
				}
			}
		}
		return http.StatusOK
	})
	firstRollout(t, c, "p3", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "2s",
		config.AnnotationPreview: "canary", config.AnnotationPreviewHold: "12s", "sluice.dev/analysis": `
interval: 1s
checks:
  - {name: success-rate, builtin: success-rate, inconclusiveLimit: 10}
webhooks:
  - {name: warm, at: before-start, timeout: 30s, url: ` + hooks.URL + `/warm}
  - {name: load, at: hold, url: ` + hooks.URL + `/load}
`})
	deploy(t, "p3", "example.com/p3:v2", nil, nil)
	st := waitOutcome(t, c, svcTarget("p3"), "p3-00002", 2*time.Minute)
	if st.Outcome != api.OutcomeSucceeded || len(st.Steps) != 3 || st.Steps[0].Weight != 0 {
		t.Fatalf("p3: %s (%s), steps %+v", st.Outcome, st.Reason, st.Steps)
	}
	var judged []string
	for _, m := range st.Analysis.Recent {
		if m.Name == "success-rate" && m.Step == 1 && m.Weight == 0 && m.Result == analysis.Passed && m.Value != nil {
			judged = append(judged, fmt.Sprintf("%.3f", *m.Value))
		}
	}
	if len(judged) == 0 || loaded.Load() == 0 {
		t.Fatalf("no success-rate round passed in the preview's hold (%d requests reached p3-00002 by its tag); recent: %+v", loaded.Load(), st.Analysis.Recent)
	}
	t.Logf("in the preview's hold, %d tagged requests; success-rate rounds passed at %v", loaded.Load(), judged)
	if w := shares(t, stk.AuditLog, "p3", "p3-00002", time.Time{}); len(w) == 0 || w[0].At.Before(st.Steps[0].EndedAt) {
		t.Errorf("p3-00002's first share %+v came before the preview's hold ended at %s", w, st.Steps[0].EndedAt)
	}
}
