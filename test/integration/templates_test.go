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
	"github.com/sluicehq/sluice/templates"
)

// templateStore plays the API server's analysis templates for the
// integration workers (the real resources are in the e2e tests).
type templateStore struct {
	mu    sync.Mutex
	specs map[string]config.TemplateSpec
	reads int
}

var analysisTemplates = &templateStore{specs: map[string]config.TemplateSpec{}}

func (s *templateStore) Read(_ context.Context, namespace string, ref config.TemplateRef) (templates.Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	spec, ok := s.specs[namespace+"/"+ref.String()]
	if !ok {
		return templates.Template{}, &templates.NotFoundError{Ref: ref, Namespace: namespace}
	}
	return templates.Template{Spec: spec, Version: fmt.Sprint(s.reads)}, nil
}

func (s *templateStore) set(key string, spec config.TemplateSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.specs[key] = spec
}

// TestTemplateReloadOnRealServer: a rollout judged by a shared template
// keeps what it read at its start when the template is edited, until the
// operator runs `sluice reload-analysis`: the hold webhook's later calls go
// where the edited template says. Its history is the one replayed for a
// template reloaded (rollout-template-reload.json).
func TestTemplateReloadOnRealServer(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p analysis.Payload
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.URL.Path)
	}))
	defer hooks.Close()
	doc := func(suite string) config.TemplateSpec {
		return config.TemplateSpec{Analysis: "interval: 1s\nwebhooks:\n  - {name: smoke, at: hold, url: \"" + hooks.URL + "/" + suite + "/{{args.service}}\"}\n",
			Args: []config.TemplateArg{{Name: "service"}}}
	}
	key := ns + "/reload-it"
	analysisTemplates.set(key, doc("v1"))
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "6s",
		config.AnnotationAnalysisTemplate: "reload-it", config.AnnotationAnalysisArgs: "service=hello"})...)
	ctx := context.Background()
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the hold's first webhook call", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(paths) > 0
	})
	analysisTemplates.set(key, doc("v2"))
	mu.Lock()
	edited := len(paths)
	mu.Unlock()
	eventually(t, 10*time.Second, "a round after the edit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(paths) > edited
	})
	mu.Lock()
	if after := paths[edited]; after != "/v1/hello" {
		t.Errorf("the first call after the edit went to %s; the rollout must keep the template as read at its start", after)
	}
	mu.Unlock()
	if out, code := s.cli("reload-analysis", "hello", "--reason", "the new smoke suite"); code != 0 || !strings.Contains(out, "reading AnalysisTemplate reload-it again") {
		t.Fatalf("reload-analysis: exit %d\n%s", code, out)
	}
	if res, err := s.ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(paths, " ")
	if !strings.HasPrefix(got, "/v1/hello") || !strings.HasSuffix(got, "/v2/hello") || strings.Contains(got[strings.Index(got, "/v2/"):], "/v1/") {
		t.Fatalf("webhook calls: %s; want /v1/hello (also after the edit) until the reload, then /v2/hello", got)
	}
	recordHistory(t, s.temporal, "rollout-template-reload.json")
}
