package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// TestPreviewOnRealServer: the candidate is tagged at 0% before its first
// share, the before-start webhook is given the tag's URL and header and
// sees the tag in the traffic, the preview holds 2s at 0% with its hold
// webhook called, and the tag is gone at the end. Its history
// is the one replayed for a preview (rollout-preview.json).
func TestPreviewOnRealServer(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []analysis.Payload
		live []string
	)
	var s *stack
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p analysis.Payload
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, p)
		live = append(live, knative.FormatTraffic(s.liveTraffic()))
	}))
	defer hooks.Close()
	doc := fmt.Sprintf("interval: 1s\nwebhooks:\n  - {name: smoke, at: before-start, url: %[1]s}\n  - {name: soak, at: hold, url: %[1]s}\n", hooks.URL)
	s = startStack(t, helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1s",
		config.AnnotationAnalysis: doc, config.AnnotationPreview: "canary", config.AnnotationPreviewHold: "2s"})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	if res, err := s.ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 || seen[0].Moment != "before-start" || seen[0].Preview == nil || seen[0].Preview.URL != "http://canary-hello.default.example.com" || seen[0].Preview.Header[config.TagHeader] != "canary" {
		t.Fatalf("the webhooks' calls: %+v", seen)
	}
	// The preview's hold: the soak hook is called at 0%, with the preview.
	if p := seen[1]; p.Moment != "hold" || p.Rollout.Weight != 0 || p.Rollout.Step != 1 || p.Preview == nil {
		t.Fatalf("the first hold call: %+v, want one in the preview's hold (step 1, 0%%)", p)
	}
	want := "hello-00001=100%, hello-00001=0% (tag current), hello-00002=0% (tag canary)"
	if live[0] != want || live[1] != want {
		t.Fatalf("traffic when the smoke and the first soak ran: %q, want %s", live[:2], want)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00002=100%" {
		t.Fatalf("traffic at the end: %s", got)
	}
	recordHistory(t, s.temporal, "rollout-preview.json")
}
