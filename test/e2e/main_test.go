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
// calls onStack, so they run together afterwards, as many at once as
// -parallel says (`make test` runs four), and the suite grows without the
// run growing with it. A scenario on clusters of its own (the upgrade)
// takes none of those places: it starts with them, and runs beside them.
// Services stay until the stack stops: a deleted pod's IP goes to the
// next pod, and Prometheus, still holding the old pod's target_info for
// that address, then cannot join the built-in checks.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// stackPlaces bounds the scenarios that share stk and run together. The
// testing package's own bound (-parallel) is lifted in TestMain and kept
// here instead, so that a scenario which needs no place on stk does not
// wait in the same queue: it starts when the serial scenarios have ended,
// whatever order the testing package resumes the others in.
var stackPlaces chan struct{}

func TestMain(m *testing.M) {
	flag.Parse()
	n := flag.Lookup("test.parallel").Value.(flag.Getter).Get().(int)
	stackPlaces = make(chan struct{}, max(n, 1))
	if err := flag.Set("test.parallel", strconv.Itoa(1000)); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(run(m))
}

// onStack runs t beside the other scenarios that work on stk, once one of
// the -parallel places on it is free, and gives the place back when t has
// ended (after its cleanups' checks).
func onStack(t *testing.T) {
	t.Helper()
	t.Parallel()
	begin := time.Now()
	stackPlaces <- struct{}{}
	t.Cleanup(func() { <-stackPlaces })
	if waited := time.Since(begin); waited > time.Second {
		// Its time in --- PASS counts from its start, this wait included.
		t.Logf("waited %s for a place on the stack", waited.Round(100*time.Millisecond))
	}
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
		Adapter: true, ProgressSink: sink.URL, UI: true, Prometheus: true,
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
