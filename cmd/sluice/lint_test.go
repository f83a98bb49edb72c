package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestLintFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "services.yaml")
	yamlDocs := `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: good
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/steps: "10,50,100"
    sluice.dev/hold: 2m
    sluice.dev/gates: "100"
    sluice.dev/waves: "waves: [{clusters: [staging], soak: 30m}, {clusters: [eu, us]}]"
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: bad
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/steps: "50,20"
    sluice.dev/hold: soon
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: checked
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/analysis: |
      interval: 20s
      checks:
        - name: success-rate
          builtin: success-rate
        - {name: latency, builtin: latency-mean, compare: true, critical: true}
        - {name: p99, builtin: latency-p99, dryRun: true}
      webhooks:
        - name: approve
          at: gate
          url: https://approvals.example.com/
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: mischecked
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/analysis: |
      prometheus: http://prometheus:9090
      checks:
        - name: p99
          builtin: latency-p99
          max: 300
          maximum: 200
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ignored
---
apiVersion: serving.knative.dev/v1
kind: Configuration
metadata:
  name: api
  annotations:
    sluice.dev/rollout: enabled
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: plain
`
	if err := os.WriteFile(file, []byte(yamlDocs), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, err := readLintDocs(nil, file)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	d := config.BuiltinDefaults()
	d.PrometheusURL = "http://prometheus.monitoring:9090"
	err = lint(&out, "text", docs, lintOptions{defaults: d})
	if err == nil || err.Error() != "3 of 7 documents have findings" || exitCode(err, io.Discard) != exitFindings {
		t.Fatalf("lint error = %v", err)
	}
	got := strings.ReplaceAll(out.String(), file, "FILE")
	want := `Service good (FILE, document 1): ok: 10% for 2m0s → 50% for 2m0s → gate, 100%; Ready within 10m0s, verified within 2m0s, done within 2h0m0s; waves: staging (soak 30m0s) → eu, us, on failure stop
Service bad (FILE, document 2): invalid
  sluice.dev/steps: weights must increase and end at 100, got "50,20"
  sluice.dev/hold: is not a duration; write it like "90s", "5m" or "1h30m", got "soon"
Service checked (FILE, document 3): ok: 10% for 1m0s → 25% for 1m0s → 50% for 1m0s → 100%; Ready within 10m0s, verified within 2m0s, done within 2h0m0s; analysis every 20s: success-rate in [0.99, ∞], latency against the stable (increase is bad beyond 10% at 95%, 8 samples a side every 30s over 5m0s, critical), p99 in [-∞, 500] (dry run), webhook approve (gate) from http://prometheus.monitoring:9090; a round's score passes at 95, is marginal from 75 (built-ins over Knative's opentelemetry metric names)
Service mischecked (FILE, document 4): invalid
  sluice.dev/analysis: unknown field "checks[0].maximum"; did you mean "checks[0].max"?, got "prometheus: http://prometheus:9090\nchecks:\n  - name: p99\n    builtin: latency..."
ConfigMap ignored (FILE, document 5): skipped: sluice reads policies from Knative Services and Configurations only
Configuration api (FILE, document 6): invalid
  sluice.dev/route: a Configuration must name the Route its Revisions roll out on (Route mode)
Service plain (FILE, document 7): not opted in (sluice.dev/rollout: enabled); nothing to check
`
	if got != want {
		t.Fatalf("lint output:\n%s\nwant:\n%s", got, want)
	}
}

// runLint runs `sluice lint` as a user would and returns its output and
// exit code.
func runLint(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"lint"}, args...))
	code := exitCode(root.Execute(), &errOut)
	return out.String() + errOut.String(), code
}

func TestLintExitCodesAndJSON(t *testing.T) {
	capacityDoc := `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: gpu
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/capacity: availability
    sluice.dev/capacity-surge: "1"
    sluice.dev/hold: 5m
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "8"
`
	out, code := runLint(t, capacityDoc, "-")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"capacity (availability), 8 stages for a stable of 8 pods (the template's min-scale), each within 5m0s:",
		"stage 1: candidate 1 pods, stable 7 pods, 13% of traffic", "stage 8: candidate 8 pods, stable 0 pods, 100% of traffic"} {
		if !strings.Contains(out, want) {
			t.Errorf("lint of a capacity plan does not say %q:\n%s", want, out)
		}
	}
	out, _ = runLint(t, capacityDoc, "-", "--stable-pods", "4")
	if !strings.Contains(out, "4 stages for a stable of 4 pods (--stable-pods)") {
		t.Errorf("--stable-pods not honoured:\n%s", out)
	}

	typo := "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: typo\n  annotations:\n    sluice.dev/rollout: enabled\n    sluice.dev/gate: \"100\"\n"
	out, code = runLint(t, typo, "-o", "json", "-")
	if code != exitFindings {
		t.Fatalf("a typo: exit %d, want %d:\n%s", code, exitFindings, out)
	}
	var results []lintResult
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "]")+1]), &results); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if len(results) != 1 || results[0].Verdict != verdictInvalid || len(results[0].Findings) != 1 ||
		results[0].Findings[0].Key != "sluice.dev/gate" || results[0].Findings[0].Severity != config.SeverityError ||
		!strings.Contains(results[0].Findings[0].Message, "did you mean sluice.dev/gates?") {
		t.Fatalf("-o json: %+v", results)
	}

	for name, args := range map[string][]string{
		"missing file": {"/nonexistent/service.yaml"},
		"broken YAML":  {"-"},
		"no input":     {},
		"bad output":   {"-o", "wide", "-"},
	} {
		if out, code := runLint(t, "kind: Service\nmetadata: [\n", args...); code != exitInput {
			t.Errorf("%s: exit %d, want %d:\n%s", name, code, exitInput, out)
		}
	}
}

// A policy naming a template is checked with the template among the
// documents; one naming a template that is not there is invalid.
func TestLintTemplates(t *testing.T) {
	docs, err := readLintDocs(nil, "testdata/templates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = lint(&out, "text", docs, lintOptions{defaults: config.BuiltinDefaults(), templates: templatesIn(docs), ctx: context.Background()})
	got := out.String()
	for _, want := range []string{
		"ClusterAnalysisTemplate standard (testdata/templates.yaml, document 1): an analysis template",
		"Service cart (testdata/templates.yaml, document 2): ok: 10% for 1m0s → 25% for 1m0s → 50% for 1m0s → 100%; Ready within 10m0s, verified within 2m0s, done within 2h0m0s; analysis every 30s: latency in [-∞, 300]",
		"Service shop (testdata/templates.yaml, document 3): invalid\n  sluice.dev/analysis-template: AnalysisTemplate standard is not among the documents linted",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lint output lacks %q:\n%s", want, got)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "1 of 3 documents have findings") {
		t.Errorf("lint: %v", err)
	}
}
