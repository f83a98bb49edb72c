// Package testkit holds what sluice's test packages share: a quiet
// Temporal logger, waiting for a condition, reading the API server's audit
// log, and object names derived from a test's name.
package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// TemporalLogger is the Temporal SDK's logger for tests: warnings and
// errors only, on stderr, where `go test -v` shows them beside the test.
func TemporalLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// Eventually polls cond every interval until it reports done, and fails
// the test with cond's last word if within passes first.
func Eventually(t testing.TB, within, interval time.Duration, what string, cond func() (done bool, last string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, last := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, within, last)
		}
		time.Sleep(interval)
	}
}

// ScanAudit reads an API server's audit log (one JSON event per line) and
// calls each for every event complete with its response. A line cut short
// (the API server was killed while writing it) is skipped.
func ScanAudit(path string, each func(e *auditv1.Event) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the API server's audit log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 8<<20), 8<<20)
	for line := 1; sc.Scan(); line++ {
		var e auditv1.Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != auditv1.StageResponseComplete {
			continue
		}
		if err := each(&e); err != nil {
			return fmt.Errorf("audit log line %d: %w", line, err)
		}
	}
	return sc.Err()
}

// TrafficOf is the traffic a write of a Service or Route sent, and whether
// it sent any.
func TrafficOf(e *auditv1.Event) ([]servingv1.TrafficTarget, bool) {
	if e.RequestObject == nil {
		return nil, false
	}
	raw := e.RequestObject.Raw
	if len(raw) > 0 && raw[0] == '[' {
		// A JSON patch, as sluice writes traffic: the operation that
		// sets spec.traffic.
		var ops []struct {
			Op    string          `json:"op"`
			Path  string          `json:"path"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(raw, &ops) != nil {
			return nil, false
		}
		for _, op := range ops {
			var traffic []servingv1.TrafficTarget
			if (op.Op == "add" || op.Op == "replace") && op.Path == "/spec/traffic" && json.Unmarshal(op.Value, &traffic) == nil && len(traffic) > 0 {
				return traffic, true
			}
		}
		return nil, false
	}
	var body struct {
		Spec struct {
			Traffic []servingv1.TrafficTarget `json:"traffic"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &body) != nil || len(body.Spec.Traffic) == 0 {
		return nil, false
	}
	return body.Spec.Traffic, true
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// Name derives a Kubernetes object name from the test's name: lower case,
// a DNS label of at most max characters (a Knative Service's name must
// leave room for its Revisions' suffix), unique per test through a short
// hash when it has to be cut.
func Name(t testing.TB, max int) string {
	n := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	if len(n) <= max {
		return n
	}
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	suffix := fmt.Sprintf("-%06x", h.Sum32()&0xffffff)
	return strings.TrimRight(n[:max-len(suffix)], "-") + suffix
}

// Kubectl runs kubectl through run (a stack's Kubectl) with a two-minute
// limit and fails the test if it fails; it returns the output.
func Kubectl(t testing.TB, run func(context.Context, ...string) (string, error), args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
