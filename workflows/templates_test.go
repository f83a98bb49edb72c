package workflows

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/measure"
	"github.com/sluicehq/sluice/templates"
)

// fakeTemplates holds templates by reference, as the API server would.
type fakeTemplates struct {
	mu    sync.Mutex
	specs map[string]config.TemplateSpec
	reads int
}

func (f *fakeTemplates) Read(_ context.Context, namespace string, ref config.TemplateRef) (templates.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	spec, ok := f.specs[ref.String()]
	if !ok {
		return templates.Template{}, &templates.NotFoundError{Ref: ref, Namespace: namespace}
	}
	return templates.Template{Spec: spec, Version: fmt.Sprint(6 + f.reads)}, nil
}

func (f *fakeTemplates) set(ref string, spec config.TemplateSpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs[ref] = spec
}

func templateHarness(t *testing.T, ref string, tmpl *fakeTemplates) *harness {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationAnalysisTemplate: ref, config.AnnotationAnalysisArgs: "suite=hello"}, true)...)
	h.env.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: h.k}, Defaults: config.BuiltinDefaults(), WatchLimit: testWatch, Templates: tmpl})
	return h
}

// hookedTemplateHarness rolls out hello-00002 judged by the template
// cluster/standard, its webhooks passing; urls collects where they went.
func hookedTemplateHarness(t *testing.T, tmpl *fakeTemplates) (*harness, *[]string) {
	h := templateHarness(t, "cluster/standard", tmpl)
	urls := &[]string{}
	withAnalysis(h, nil, func(_ int, in measure.WebhookInput) analysis.Measurement {
		*urls = append(*urls, in.Hook.URL)
		return analysis.Measurement{Result: analysis.Passed, StatusCode: 200}
	})
	return h, urls
}

const sharedDoc = "webhooks:\n  - {name: smoke, at: hold, url: http://smoke/{{args.suite}}}\n"

func TestSharedTemplateJudgesTheRollout(t *testing.T) {
	tmpl := &fakeTemplates{specs: map[string]config.TemplateSpec{"cluster/standard": {Analysis: sharedDoc, Args: []config.TemplateArg{{Name: "suite"}}}}}
	h, urls := hookedTemplateHarness(t, tmpl)
	// Edited mid-rollout: the running rollout keeps what it read at its start.
	h.at(30*time.Second, func() {
		tmpl.set("cluster/standard", config.TemplateSpec{Analysis: "webhooks:\n  - {name: smoke, at: hold, url: http://elsewhere/}\n", Args: []config.TemplateArg{{Name: "suite"}}})
	})
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result = %+v", res)
	}
	if len(*urls) == 0 {
		t.Fatal("the template's hold webhook was never called")
	}
	for _, u := range *urls {
		if u != "http://smoke/hello" {
			t.Fatalf("hold webhook calls: %v, want each to http://smoke/hello (the argument filled in, the edit not seen)", *urls)
		}
	}
	st := h.status()
	if ref := st.Policy.AnalysisTemplate; ref == nil || ref.Version != "7" || st.Policy.Analysis == nil {
		t.Errorf("status policy: template %+v, analysis %v", ref, st.Policy.Analysis)
	}
	if tmpl.reads != 1 {
		t.Errorf("template read %d times, want once, at the start", tmpl.reads)
	}
}

func TestMissingTemplateRefusedBeforeTraffic(t *testing.T) {
	h := templateHarness(t, "standard", &fakeTemplates{specs: map[string]config.TemplateSpec{}})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, "sluice.dev/analysis-template: AnalysisTemplate default/standard not found") {
		t.Fatalf("result = %+v", res)
	}
	if n := h.k.WriteCount("hello"); n != 0 {
		t.Errorf("traffic writes = %d, want none", n)
	}
	if mark := h.endedMark("hello", "hello-00002"); mark != string(api.OutcomeFailed) {
		t.Errorf("hello-00002 marked %q", mark)
	}
}

// reload-analysis: the operator makes a running rollout judge by the
// template as it is now; later calls go where the edited template says.
func TestReloadAnalysisFollowsTheTemplate(t *testing.T) {
	tmpl := &fakeTemplates{specs: map[string]config.TemplateSpec{"cluster/standard": {Analysis: sharedDoc, Args: []config.TemplateArg{{Name: "suite"}}}}}
	h, urls := hookedTemplateHarness(t, tmpl)
	var reload *updateResult
	h.at(90*time.Second, func() {
		tmpl.set("cluster/standard", config.TemplateSpec{Analysis: "webhooks:\n  - {name: smoke, at: hold, url: http://elsewhere/{{args.suite}}}\n", Args: []config.TemplateArg{{Name: "suite"}}})
		reload = h.update(api.CommandReloadAnalysis, api.Command{By: "platform@example.com", Reason: "new smoke suite"})
	})
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result = %+v", res)
	}
	if reload == nil || !reload.accepted {
		t.Fatalf("reload-analysis not accepted: %+v", reload)
	}
	if u := *urls; len(u) < 2 || u[0] != "http://smoke/hello" || u[len(u)-1] != "http://elsewhere/hello" {
		t.Fatalf("hold webhook calls: %v, want http://smoke/hello before the reload and http://elsewhere/hello after", u)
	}
	st := h.status()
	if v := st.Policy.AnalysisTemplate.Version; v != "8" || tmpl.reads != 2 {
		t.Errorf("template version %q after %d reads, want 8 after 2", v, tmpl.reads)
	}
}

func TestReloadAnalysisRejectedWithoutATemplate(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	var u *updateResult
	h.at(30*time.Second, func() { u = h.update(api.CommandReloadAnalysis, api.Command{By: "a"}) })
	h.run("hello-00002")
	if !u.rejectedWith("names no analysis template (sluice.dev/analysis-template)") {
		t.Fatalf("reload-analysis without a template: %+v", u)
	}
}
