package worker

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"k8s.io/client-go/rest"

	"github.com/sluicehq/sluice/mirror"
)

func TestKubeRate(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	qps, burst, err := kubeRate(env(nil))
	if err != nil || qps != DefaultKubeQPS || burst != DefaultKubeBurst {
		t.Errorf("defaults: %v %v %v", qps, burst, err)
	}
	qps, burst, err = kubeRate(env(map[string]string{EnvKubeQPS: "12.5", EnvKubeBurst: " 30 "}))
	if err != nil || qps != 12.5 || burst != 30 {
		t.Errorf("set: %v %v %v", qps, burst, err)
	}
	for _, bad := range []map[string]string{{EnvKubeQPS: "0"}, {EnvKubeQPS: "fast"}, {EnvKubeBurst: "0"}, {EnvKubeBurst: "1.5"}} {
		_, _, err := kubeRate(env(bad))
		for k := range bad {
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%v: error %v should name %s", bad, err, k)
			}
		}
	}
}

func TestWarningsAreLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	w := &warnOnce{seen: map[string]bool{}}
	for i := 0; i < 81; i++ {
		w.HandleWarningHeader(299, "", "Kubernetes default value is insecure, Knative may default this to secure in a future release")
	}
	w.HandleWarningHeader(299, "", "another warning")
	if n := strings.Count(buf.String(), "logged once"); n != 2 {
		t.Fatalf("%d warning lines, want one per distinct warning (2):\n%s", n, buf.String())
	}
}

func TestRolloutResourcesRate(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	log := slog.New(slog.DiscardHandler)
	t.Setenv(EnvRolloutResourcesRate, "3")
	if m, err := NewMirror(cfg, "default", log); err != nil || m.Rate != 3 {
		t.Errorf("rate 3: %+v, %v", m, err)
	}
	for _, bad := range []string{"0", "-1", "fast", "2.5"} {
		t.Setenv(EnvRolloutResourcesRate, bad)
		if _, err := NewMirror(cfg, "default", log); err == nil || !strings.Contains(err.Error(), EnvRolloutResourcesRate) {
			t.Errorf("%q: error %v should name %s", bad, err, EnvRolloutResourcesRate)
		}
	}
	t.Setenv(EnvRolloutResourcesRate, "")
	if m, err := NewMirror(cfg, "default", log); err != nil || m.Rate != mirror.DefaultWriteRate {
		t.Errorf("unset: %+v, %v", m, err)
	}
}

func TestTemporalCompression(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == EnvTemporalCompression && v != "" }
	}
	for v, want := range map[string]any{"": &client.GrpcCompressionNone{}, "none": &client.GrpcCompressionNone{}, " gzip ": &client.GrpcCompressionGzip{}} {
		got, err := temporalCompression(env(v))
		if err != nil || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", want) {
			t.Errorf("%q: %T, %v; want %T", v, got, err, want)
		}
	}
	if _, err := temporalCompression(env("zstd")); err == nil || !strings.Contains(err.Error(), `SLUICE_TEMPORAL_COMPRESSION: must be none or gzip, got "zstd"`) {
		t.Errorf("zstd: %v", err)
	}
}
