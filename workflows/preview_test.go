package workflows

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/measure"
)

const smokeDoc = `
webhooks:
  - name: smoke
    url: http://smoke/
    at: before-start
`

// previewHarness rolls out hello-00002 with a preview tag and a smoke
// before-start webhook that answers as smoke says, seeing the Service's
// traffic and the payload when it is called.
func previewHarness(t *testing.T, tag string, smoke analysis.Result, seen *[]string, payload *analysis.Payload) *harness {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationAnalysis: smokeDoc, config.AnnotationPreview: tag}, true)...)
	return withAnalysis(h, nil, func(_ int, in measure.WebhookInput) analysis.Measurement {
		*seen = append(*seen, knative.FormatTraffic(h.traffic("hello")))
		*payload = in.Payload
		return analysis.Measurement{Result: smoke, StatusCode: 200}
	})
}

func TestPreviewTagBeforeTheFirstShare(t *testing.T) {
	var seen []string
	var payload analysis.Payload
	h := previewHarness(t, "preview", analysis.Passed, &seen, &payload)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result = %+v", res)
	}
	want := "hello-00001=90%, hello-00000=10% (tag legacy), hello-00001=0% (tag current), hello-00002=0% (tag preview)"
	if len(seen) != 1 || seen[0] != want {
		t.Fatalf("traffic when the smoke webhook ran: %q, want %q (the candidate tagged, no share)", seen, want)
	}
	p := payload.Preview
	if p == nil || p.Tag != "preview" || p.URL != "http://preview-hello.default.example.com" || p.Header[config.TagHeader] != "preview" {
		t.Fatalf("the webhook's preview: %+v", p)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"), tgt("hello-00002", 90, ""))
	if st := h.status(); st.Preview == nil || st.Preview.URL != p.URL || st.Preview.Header != "Knative-Serving-Tag: preview" {
		t.Errorf("status preview: %+v", st.Preview)
	}
	if n := h.k.WriteCount("hello"); n != 4 {
		t.Errorf("traffic writes = %d, want 4: the preview tag, then 25%%, 50%% (each keeping it) and 100%% (without it)", n)
	}
}

func TestFailedPreviewNeverGivesAShare(t *testing.T) {
	var seen []string
	var payload analysis.Payload
	h := previewHarness(t, "preview", analysis.Failed, &seen, &payload)
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "before-start webhook smoke") {
		t.Fatalf("result = %+v", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"))
	if n := h.k.WriteCount("hello"); n != 2 {
		t.Errorf("traffic writes = %d, want 2: the preview tag and its removal", n)
	}
	if st := h.status(); st.Steps[0].StartedAt.IsZero() == false {
		t.Error("the first step started")
	}
}

func TestPreviewTagTaken(t *testing.T) {
	var seen []string
	var payload analysis.Payload
	h := previewHarness(t, "current", analysis.Passed, &seen, &payload)
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, `the tag "current" is taken`) || len(seen) != 0 {
		t.Fatalf("result = %+v, webhook calls %d", res, len(seen))
	}
	if n := h.k.WriteCount("hello"); n != 0 {
		t.Errorf("traffic writes = %d, want none", n)
	}
}

const previewChecksDoc = `
prometheus: http://prometheus:9090
interval: 20s
checks:
  - name: success-rate
    builtin: success-rate
webhooks:
  - name: smoke
    url: http://smoke/
    at: before-start
`

// sluice.dev/preview-hold: the preview holds at 0% while the analysis
// judges the traffic sent to the tag; a failed round there rolls back
// before any share.
func TestPreviewHoldJudgesTheTaggedTraffic(t *testing.T) {
	for _, c := range []struct {
		name    string
		bad     bool
		outcome api.Outcome
		writes  int
	}{
		{"healthy", false, api.OutcomeSucceeded, 4},
		{"failing", true, api.OutcomeRolledBack, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, helloObjects(map[string]string{config.AnnotationAnalysis: previewChecksDoc,
				config.AnnotationPreview: "preview", config.AnnotationPreviewHold: "1m"}, true)...)
			var steps []int
			var atFirst string
			withAnalysis(h, func(_ int, in measure.CheckInput) analysis.Measurement {
				steps = append(steps, in.Step)
				if len(steps) == 1 {
					atFirst = knative.FormatTraffic(h.traffic("hello"))
				}
				if c.bad {
					return value(0.5)
				}
				return value(0.999)
			}, ok200)
			h.run("hello-00002")
			if res := h.result(); res.Outcome != c.outcome {
				t.Fatalf("result = %+v", res)
			}
			if want := "hello-00001=90%, hello-00000=10% (tag legacy), hello-00001=0% (tag current), hello-00002=0% (tag preview)"; atFirst != want {
				t.Errorf("traffic at the first round: %s, want the preview's, no share", atFirst)
			}
			if len(steps) == 0 || steps[0] != 1 {
				t.Errorf("checks measured at steps %v, want the first at step 1, the preview's", steps)
			}
			st := h.status()
			if len(st.Steps) != 4 || st.Steps[0].Weight != 0 {
				t.Errorf("steps %+v, want the preview's hold at 0%% first", st.Steps)
			}
			if n := h.k.WriteCount("hello"); n != c.writes {
				t.Errorf("traffic writes = %d, want %d", n, c.writes)
			}
		})
	}
}
