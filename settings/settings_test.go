package settings

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestLoadSettings(t *testing.T) {
	s, err := LoadSettings(lookupFrom(nil))
	if err != nil || s.TaskQueue != api.DefaultTaskQueue || s.HTTPAddr != ":9090" || s.Defaults.Hold != time.Minute {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	s, err = LoadSettings(lookupFrom(map[string]string{
		EnvTaskQueue: "q", config.EnvSteps: "20,100", config.EnvHold: "30s", config.EnvDeadline: "1h", EnvHTTPAddr: "127.0.0.1:0",
	}))
	if err != nil || s.TaskQueue != "q" || len(s.Defaults.Steps) != 2 || s.Defaults.Hold != 30*time.Second || s.Defaults.Deadline != time.Hour {
		t.Fatalf("from env: %+v, %v", s, err)
	}
}

func TestLoadSettingsErrors(t *testing.T) {
	for env, want := range map[string]string{
		config.EnvSteps:            `SLUICE_DEFAULT_STEPS: weights must increase and end at 100, got "30,20"`,
		config.EnvHold:             `SLUICE_DEFAULT_HOLD: is not a duration`,
		config.EnvProgressDeadline: `SLUICE_DEFAULT_PROGRESS_DEADLINE: is not a duration`,
	} {
		value := map[string]string{config.EnvSteps: "30,20"}[env]
		if value == "" {
			value = "soon"
		}
		_, err := LoadSettings(lookupFrom(map[string]string{env: value}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: error %v, want %q", env, value, err, want)
		}
	}
	_, err := LoadSettings(lookupFrom(map[string]string{config.EnvHold: "1h", config.EnvDeadline: "2h"}))
	if err == nil || !strings.Contains(err.Error(), "sum of all holds") {
		t.Errorf("holds longer than the deadline: %v", err)
	}
}

func TestLoadSettingsSizing(t *testing.T) {
	s, err := LoadSettings(lookupFrom(nil))
	if err != nil || s.Sizing != DefaultSizing {
		t.Fatalf("default sizing: %+v, %v", s.Sizing, err)
	}
	s, err = LoadSettings(lookupFrom(map[string]string{EnvWorkflowPollers: "16", EnvActivityPollers: " 4 ", EnvMaxActivities: "200"}))
	if err != nil || s.Sizing != (WorkerSizing{WorkflowPollers: 16, ActivityPollers: 4, MaxActivities: 200}) {
		t.Fatalf("sizing from env: %+v, %v", s.Sizing, err)
	}
	for env, value := range map[string]string{EnvWorkflowPollers: "1", EnvActivityPollers: "0", EnvMaxActivities: "lots"} {
		_, err := LoadSettings(lookupFrom(map[string]string{env: value}))
		if err == nil || !strings.Contains(err.Error(), env+": must be") {
			t.Errorf("%s=%s: error %v, want one naming the variable", env, value, err)
		}
	}
}

// The way back to the previous release stays open unless the operator
// closes it; a value that is neither is an error naming both.
func TestLoadSettingsWorkflowChanges(t *testing.T) {
	s, err := LoadSettings(lookupFrom(nil))
	if err != nil || s.WorkflowChanges != ChangesCompatible {
		t.Fatalf("default: %q, %v", s.WorkflowChanges, err)
	}
	s, err = LoadSettings(lookupFrom(map[string]string{EnvWorkflowChanges: " all "}))
	if err != nil || s.WorkflowChanges != ChangesAll {
		t.Fatalf("all: %q, %v", s.WorkflowChanges, err)
	}
	_, err = LoadSettings(lookupFrom(map[string]string{EnvWorkflowChanges: "latest"}))
	if err == nil || !strings.Contains(err.Error(), `SLUICE_WORKFLOW_CHANGES: must be "compatible"`) || !strings.Contains(err.Error(), `"all"`) {
		t.Fatalf("latest: %v", err)
	}
}

func TestClusterSettings(t *testing.T) {
	s, err := LoadSettings(lookupFrom(map[string]string{EnvCluster: "eu-west-1"}))
	if err != nil || s.Cluster != "eu-west-1" || s.TaskQueue != "sluice-rollouts-eu-west-1" {
		t.Fatalf("cluster: %+v, %v", s, err)
	}
	// A task queue named outright wins over the cluster's default.
	s, err = LoadSettings(lookupFrom(map[string]string{EnvCluster: "eu-west-1", EnvTaskQueue: "q"}))
	if err != nil || s.Cluster != "eu-west-1" || s.TaskQueue != "q" {
		t.Fatalf("cluster and task queue: %+v, %v", s, err)
	}
	if _, err := LoadSettings(lookupFrom(map[string]string{EnvCluster: "EU West"})); err == nil || !strings.Contains(err.Error(), `SLUICE_CLUSTER: cluster name "EU West" must be lower-case letters, digits and dashes`) {
		t.Fatalf("bad cluster name: %v", err)
	}
	r, err := LoadReceiverSettings(lookupFrom(map[string]string{EnvCluster: "us-east"}))
	if err != nil || r.Cluster != "us-east" || r.TaskQueue != "sluice-rollouts-us-east" {
		t.Fatalf("receiver: %+v, %v", r, err)
	}
	if _, err := LoadReceiverSettings(lookupFrom(map[string]string{EnvCluster: "-x"})); err == nil {
		t.Fatal("the receiver took a bad cluster name")
	}
}

func TestSettingsPrometheusURL(t *testing.T) {
	env := map[string]string{config.EnvPrometheusURL: "http://prometheus.monitoring:9090"}
	s, err := LoadSettings(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || s.Defaults.PrometheusURL != env[config.EnvPrometheusURL] {
		t.Fatalf("LoadSettings = %q, %v", s.Defaults.PrometheusURL, err)
	}
	env[config.EnvPrometheusURL] = "prometheus:9090"
	if _, err := LoadSettings(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil || !strings.Contains(err.Error(), config.EnvPrometheusURL) {
		t.Fatalf("bad URL accepted: %v", err)
	}
}

// The worker's default flavour of Knative metrics comes from its environment.
func TestSettingsKnativeMetrics(t *testing.T) {
	env := map[string]string{config.EnvKnativeMetrics: "opencensus"}
	s, err := LoadSettings(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || s.Defaults.KnativeMetrics != config.MetricsOpenCensus {
		t.Fatalf("LoadSettings = %q, %v", s.Defaults.KnativeMetrics, err)
	}
	env[config.EnvKnativeMetrics] = "otel"
	if _, err := LoadSettings(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil || !strings.Contains(err.Error(), config.EnvKnativeMetrics) {
		t.Fatalf("bad value accepted: %v", err)
	}
}

func TestProfilingSetting(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, " 1 ": true, "false": false} {
		s, err := LoadSettings(lookupFrom(map[string]string{EnvPprof: v}))
		if err != nil || s.Profiling != want {
			t.Errorf("worker, %s=%q: %v, %v; want %v", EnvPprof, v, s.Profiling, err, want)
		}
		r, err := LoadReceiverSettings(lookupFrom(map[string]string{EnvPprof: v}))
		if err != nil || r.Profiling != want {
			t.Errorf("receiver, %s=%q: %v, %v; want %v", EnvPprof, v, r.Profiling, err, want)
		}
	}
	const want = `SLUICE_PPROF: must be true or false, got "on"`
	if _, err := LoadSettings(lookupFrom(map[string]string{EnvPprof: "on"})); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("worker: %v, want %q", err, want)
	}
	if _, err := LoadReceiverSettings(lookupFrom(map[string]string{EnvPprof: "on"})); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("receiver: %v, want %q", err, want)
	}
}
