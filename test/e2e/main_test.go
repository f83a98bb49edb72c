// Package e2e runs sluice's end-to-end scenarios on the local stack (see
// test/stack): real kube-apiserver and etcd with Knative's CRDs, the
// Temporal dev server, Knative Eventing's ApiServerSource adapter, sluice's
// worker and receiver processes, and Knative Serving's own controller,
// webhook and autoscaler over kwok's pods. Each
// scenario checks what a user would: the traffic the API server returns,
// the rollout's outcome, and the progress events received.
//
// Scenarios share the stack. Those that change what others rely on — kill
// or stop sluice's processes or Knative's webhook, cordon the node, patch
// Knative's ConfigMaps, apply sluice's manifests, start other clusters —
// run alone, first; every other scenario works on objects of its own and
// calls t.Parallel, so they run together afterwards (`make test` runs
// four at a time), and the suite grows without the run growing with it.
// Services stay until the stack stops: a deleted pod's IP goes to the
// next pod, and Prometheus, still holding the old pod's target_info for
// that address, then cannot join the built-in checks.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/test/eventsink"
	"github.com/sluicehq/sluice/test/historycheck"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
)

var (
	stk  *stack.Stack
	sink *eventsink.Sink
	// stackOptions are stk's, for tests that start a stack beside it.
	stackOptions stack.Options
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "e2e: skipped:", err)
		return 0
	}
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := stack.RepoRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	crds, err := stack.KnativeCRDDirs(ctx, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, stopSink := eventsink.Start()
	defer stopSink()
	sink = s
	stackOptions = stack.Options{
		Dir: dir, Tools: tools, Root: root, CRDDirs: crds, DeployDir: filepath.Join(root, "config", "deploy"),
		Adapter: true, ProgressSink: sink.URL, UI: true, Prometheus: true, Audit: true, AuditTrafficOnly: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	stk, err = stack.Start(ctx, stackOptions)
	if errors.Is(err, stack.ErrNeedsRoot) && os.Getenv("CI") == "" {
		fmt.Fprintln(os.Stderr, "e2e: skipped:", err)
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start the local stack:", err)
		return 1
	}
	code := m.Run()
	stopClusters()
	fmt.Fprintln(os.Stderr, "e2e: the stack's peak memory:", stk.PeakRSS())
	fmt.Fprintln(os.Stderr, "e2e: the data plane:", stk.QueueProxyUsage())
	// The same invariant over every rollout of the suite, scenario or not.
	if c, err := client.Dial(client.Options{HostPort: stk.TemporalAddr, Logger: testkit.TemporalLogger()}); err == nil {
		sweep, stop := context.WithTimeout(context.Background(), 2*time.Minute)
		failures, err := historycheck.WorkflowTaskFailures(sweep, c, "")
		stop()
		c.Close()
		if err != nil || len(failures) > 0 {
			fmt.Fprintf(os.Stderr, "e2e: workflow task failures: %v\n%s\n", err, strings.Join(failures, "\n"))
			code = 1
		}
	}
	if code != 0 {
		fmt.Fprintln(os.Stderr, stk.Logs())
		keepLogs(dir)
	}
	stk.Stop()
	return code
}

// sluice runs the sluice CLI against the stack.
func sluice(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return sluiceEnv(t, nil, args...)
}

// sluiceEnv is sluice with more environment, e.g. SLUICE_CLUSTER.
func sluiceEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	args = append(args, "--address", stk.TemporalAddr, "--as", "e2e@test")
	cmd := exec.Command(os.Getenv("SLUICE_BIN"), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// keepLogs copies the stack's logs into $SLUICE_ARTIFACTS/e2e-logs, so a
// failed run can be read in full after the stack's directory is gone.
func keepLogs(dir string) {
	out := os.Getenv("SLUICE_ARTIFACTS")
	if out == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	dst := filepath.Join(out, "e2e-logs")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
		}
	}
	fmt.Fprintln(os.Stderr, "e2e: the stack's logs are in", dst)
}
