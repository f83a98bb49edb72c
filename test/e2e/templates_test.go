package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

// One ClusterAnalysisTemplate judges two Services, each with its own
// argument: its hold webhook passes tm1's candidate and fails tm2's, which
// rolls back. A Service naming a template that does not exist is refused
// before any traffic moves, and `kubectl apply` warned of it when it was
// written.
func TestSharedTemplateOnKnative(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	hooks := newHookServer(t, func(p analysis.Payload) int {
		if p.Moment == "hold" && p.Metadata["suite"] == "tm2" {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	tmpl := `apiVersion: sluice.dev/v1alpha1
kind: ClusterAnalysisTemplate
metadata: {name: e2e-standard}
spec:
  args: [{name: suite}, {name: interval, value: 1s}]
  analysis: |
    interval: {{args.interval}}
    webhooks:
      - {name: smoke, at: hold, url: "` + hooks.URL + `/{{args.suite}}", metadata: {suite: "{{args.suite}}"}}
`
	file := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(file, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if out, err := stk.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("apply the template: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = stk.Kubectl(context.Background(), "delete", "-f", file) })
	for _, name := range []string{"tm1", "tm2"} {
		firstRollout(t, c, name, map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "3s",
			config.AnnotationAnalysisTemplate: "cluster/e2e-standard", config.AnnotationAnalysisArgs: "suite=" + name})
		deploy(t, name, "example.com/"+name+":v2", nil, nil)
	}
	st := waitOutcome(t, c, svcTarget("tm1"), "tm1-00002", 90*time.Second)
	if st.Outcome != api.OutcomeSucceeded || st.Policy.AnalysisTemplate == nil || st.Policy.AnalysisTemplate.Version == "" {
		t.Fatalf("tm1: %s (%s), template %+v", st.Outcome, st.Reason, st.Policy.AnalysisTemplate)
	}
	if out, err := sluice(t, "status", "tm1"); err != nil || !strings.Contains(out, "from ClusterAnalysisTemplate e2e-standard at version "+st.Policy.AnalysisTemplate.Version) {
		t.Errorf("sluice status tm1: %v\n%s", err, out)
	}
	st = waitOutcome(t, c, svcTarget("tm2"), "tm2-00002", 90*time.Second)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "smoke") {
		t.Fatalf("tm2: %s (%s)", st.Outcome, st.Reason)
	}
	for _, name := range []string{"tm1", "tm2"} {
		if n := len(hooks.moments(name + "-00002")); n == 0 {
			t.Errorf("the template's webhook was never called for %s", name)
		}
	}

	// A template that does not exist: warned of when written, refused
	// before any traffic moves when rolled out.
	firstRollout(t, c, "tm3", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s"})
	svc := `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: tm3
  namespace: default
  annotations: {sluice.dev/analysis-template: cluster/e2e-missing}
spec:
  template:
    spec:
      containers: [{image: example.com/tm3:v2}]
`
	svcFile := filepath.Join(t.TempDir(), "tm3.yaml")
	if err := os.WriteFile(svcFile, []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := stk.Kubectl(ctx, "apply", "-f", svcFile)
	if err != nil || !strings.Contains(out, "Warning: sluice: sluice.dev/analysis-template: ClusterAnalysisTemplate e2e-missing not found") {
		t.Fatalf("kubectl apply of a Service naming a missing template: %v\n%s", err, out)
	}
	st = waitOutcome(t, c, svcTarget("tm3"), "tm3-00002", 60*time.Second)
	if st.Outcome != api.OutcomeFailed || !strings.Contains(st.Reason, "sluice.dev/analysis-template: ClusterAnalysisTemplate e2e-missing not found") {
		t.Fatalf("tm3: %s (%s)", st.Outcome, st.Reason)
	}
	if w := shares(t, stk.AuditLog, "tm3", "tm3-00002", time.Time{}); len(w) != 0 {
		t.Errorf("tm3-00002 was given a share: %+v", w)
	}
	if got := serviceTraffic(t, "tm3"); got != "tm3-00001=100%" {
		t.Errorf("tm3's traffic: %s", got)
	}
}
