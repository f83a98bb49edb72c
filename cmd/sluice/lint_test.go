package main

import (
	"bytes"
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
	err = lint(&out, docs, d)
	if err == nil || err.Error() != "3 of 6 policies are invalid" {
		t.Fatalf("lint error = %v", err)
	}
	got := strings.ReplaceAll(out.String(), file, "FILE")
	want := `Service good (FILE): ok: 10% for 2m0s → 50% for 2m0s → gate, 100%; Ready within 10m0s, verified within 2m0s, done within 2h0m0s; waves: staging (soak 30m0s) → eu, us, on failure stop
Service bad (FILE): invalid
  sluice.dev/steps: weights must increase and end at 100, got "50,20"
  sluice.dev/hold: is not a duration; write it like "90s", "5m" or "1h30m", got "soon"
Service checked (FILE): ok: 10% for 1m0s → 25% for 1m0s → 50% for 1m0s → 100%; Ready within 10m0s, verified within 2m0s, done within 2h0m0s; analysis every 20s: success-rate in [0.99, ∞], latency against the stable (increase is bad beyond 10% at 95%, 8 samples a side every 30s over 5m0s, critical), p99 in [-∞, 500] (dry run), webhook approve (gate) from http://prometheus.monitoring:9090; a round's score passes at 95, is marginal from 75 (built-ins over Knative's opentelemetry metric names)
Service mischecked (FILE): invalid
  sluice.dev/analysis: is not a valid analysis document (see docs/analysis.md): unknown field "maximum", got "prometheus: http://prometheus:9090\nchecks:\n  - name: p99\n    builtin: latency..."
Configuration api (FILE): invalid
  sluice.dev/route: a Configuration must name the Route its Revisions roll out on
Service plain (FILE): not opted in (sluice.dev/rollout: enabled); nothing to check
`
	if got != want {
		t.Fatalf("lint output:\n%s\nwant:\n%s", got, want)
	}
}
