package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/version"
	"github.com/sluicehq/sluice/workflows/control"
)

// sluiceCode runs the CLI and returns its output and exit code.
func sluiceCode(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	args = append(args, "--address", stk.TemporalAddr, "--as", "e2e@test")
	out, err := exec.Command(bin, args...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// Every CLI verb against the stack: list, status (text, yaml, json, --watch),
// abort, retry, history, promote --full through the kn plugin, lint, version.
func TestCLIVerbs(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	bin := os.Getenv("SLUICE_BIN")
	kn := filepath.Join(filepath.Dir(bin), "kn-sluice")
	firstRollout(t, c, "cli", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s", "sluice.dev/gates": "100"})
	deploy(t, "cli", "example.com/cli:v2", nil, nil)
	waitStatus(t, c, svcTarget("cli"), 60*time.Second, "the gate", func(s api.Status) bool {
		return s.Candidate == "cli-00002" && s.Phase == api.PhaseGate
	})

	// list, filtered by phase, as JSON (the visibility store may lag a
	// moment). Other tests' rollouts may be at a gate too: every row must be
	// at one, and this rollout's row must be there once.
	var listed []control.Summary
	mine := func() (n int, row control.Summary) {
		for _, l := range listed {
			if l.Target == "default/service/cli" {
				n, row = n+1, l
			}
		}
		return n, row
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		out, code := sluiceCode(t, bin, "list", "--phase", "AwaitingPromotion", "-o", "json")
		if code == 0 && json.Unmarshal([]byte(out), &listed) == nil {
			if n, row := mine(); n == 1 && row.Candidate == "cli-00002" {
				break
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if n, row := mine(); n != 1 || row.Weight != 50 {
		t.Fatalf("sluice list --phase AwaitingPromotion: %+v", listed)
	}
	for _, l := range listed {
		if l.Phase != string(api.PhaseGate) {
			t.Fatalf("sluice list --phase AwaitingPromotion listed a rollout in phase %s: %+v", l.Phase, l)
		}
	}
	if out, code := sluiceCode(t, bin, "list"); code != 0 || !strings.Contains(out, "default/service/cli") || !strings.Contains(out, "AwaitingPromotion") {
		t.Fatalf("sluice list: %d\n%s", code, out)
	}

	// status as YAML.
	out, code := sluiceCode(t, bin, "status", "cli", "-o", "yaml")
	var st map[string]any
	if code != 0 || yaml.Unmarshal([]byte(out), &st) != nil || st["phase"] != "AwaitingPromotion" || st["candidate"] != "cli-00002" {
		t.Fatalf("sluice status -o yaml: %d\n%s", code, out)
	}

	// status --watch follows the rollout; an abort ends it with exit code 6.
	watch := exec.Command(bin, "status", "cli", "--watch", "--address", stk.TemporalAddr)
	var watchOut strings.Builder
	watch.Stdout, watch.Stderr = &watchOut, &watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if out, code := sluiceCode(t, bin, "abort", "cli", "--reason", "testing watch"); code != 0 {
		t.Fatalf("sluice abort: %d\n%s", code, out)
	}
	err := watch.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 6 || !strings.Contains(watchOut.String(), "cli-00002 AwaitingPromotion step 2/2 at 50%") ||
		!strings.Contains(watchOut.String(), "cli-00002 Aborted: aborted by e2e@test: testing watch") {
		t.Fatalf("sluice status --watch: %v\n%s", err, watchOut.String())
	}

	// retry starts the rollout again; promote --full through the kn plugin ends it.
	if out, code := sluiceCode(t, bin, "retry", "cli"); code != 0 || !strings.Contains(out, "retrying the rollout of cli-00002") {
		t.Fatalf("sluice retry: %d\n%s", code, out)
	}
	waitStatus(t, c, svcTarget("cli"), 60*time.Second, "the gate again", func(s api.Status) bool {
		return s.Candidate == "cli-00002" && s.Phase == api.PhaseGate
	})
	if out, code := sluiceCode(t, bin, "pause", "cli", "--reason", "lunch"); code != 0 || !strings.Contains(out, "paused the rollout of cli-00002") {
		t.Fatalf("sluice pause: %d\n%s", code, out)
	}
	if out, code := sluiceCode(t, bin, "status", "cli"); code != 0 || !strings.Contains(out, "Paused:     paused by e2e@test: lunch") ||
		!strings.Contains(out, "Temporal UI: http://localhost:8233/namespaces/default/workflows/rollout%2Fdefault%2Fservice%2Fcli") {
		t.Fatalf("sluice status while paused: %d\n%s", code, out)
	}
	if out, code := sluiceCode(t, bin, "resume", "cli"); code != 0 || !strings.Contains(out, "resumed the rollout of cli-00002") {
		t.Fatalf("sluice resume: %d\n%s", code, out)
	}
	if out, code := sluiceCode(t, kn, "promote", "cli", "--full", "--reason", "ship it"); code != 0 || !strings.Contains(out, "promoting cli-00002 to 100%") {
		t.Fatalf("kn-sluice promote --full: %d\n%s", code, out)
	}
	if out, code := sluiceCode(t, bin, "status", "cli", "--watch", "--timeout", "60s"); code != 0 || !strings.Contains(out, "Succeeded") {
		t.Fatalf("sluice status --watch after promote: %d\n%s", code, out)
	}
	if out, code := sluiceCode(t, bin, "retry", "cli"); code != 3 || !strings.Contains(out, "succeeded; there is nothing to retry") {
		t.Fatalf("sluice retry after success: %d\n%s", code, out)
	}

	// history lists the aborted run and the one that succeeded.
	deadline = time.Now().Add(15 * time.Second)
	for {
		out, code = sluiceCode(t, bin, "history", "cli")
		if code == 0 && strings.Count(out, "cli-00002") >= 2 && strings.Contains(out, "Aborted") && strings.Contains(out, "Succeeded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice history: %d\n%s", code, out)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// start by hand: a rollout back to cli-00001, then abort it.
	if out, code := sluiceCode(t, bin, "start", "cli", "cli-00001", "--reason", "manual rollback drill"); code != 0 || !strings.Contains(out, "rollout of cli-00001 on default/service/cli") {
		t.Fatalf("sluice start: %d\n%s", code, out)
	}
	waitStatus(t, c, svcTarget("cli"), 60*time.Second, "the manual rollout", func(s api.Status) bool {
		return s.Candidate == "cli-00001" && s.Phase == api.PhaseHolding
	})
	if out, code := sluiceCode(t, bin, "abort", "cli", "--reason", "drill over"); code != 0 {
		t.Fatalf("sluice abort: %d\n%s", code, out)
	}
	if out, code := sluiceCode(t, bin, "status", "cli", "--watch", "--timeout", "60s"); code != 6 {
		t.Fatalf("sluice status --watch after the drill: %d\n%s", code, out)
	}

	// lint a live Service with the worker's rules, and version.
	if out, code := sluiceCode(t, bin, "lint", "--service", "cli", "--kubeconfig", stk.Kubeconfig); code != 0 || !strings.Contains(out, "Service cli: ok: 50% for 1s → gate, 100%") {
		t.Fatalf("sluice lint --service: %d\n%s", code, out)
	}
	// version: this CLI's, then every worker polling the task queue with
	// its own, judged compatible (the stack's worker is this very build).
	out, code = sluiceCode(t, bin, "version")
	first, _, _ := strings.Cut(out, " (")
	cliVersion := strings.TrimPrefix(first, "sluice ")
	if code != 0 || !strings.Contains(out, "go.temporal.io/sdk v1.51.0") || !strings.HasPrefix(cliVersion, "v0.") ||
		!strings.Contains(out, "workers on task queue "+api.DefaultTaskQueue+":") || !strings.Contains(out, "@sluice-worker/"+cliVersion+"  compatible") {
		t.Fatalf("sluice version: %d\n%s", code, out)
	}
	// The worker's /metrics names its build.
	resp, err := http.Get("http://" + stk.WorkerHTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `sluice_build_info{goversion="` + runtime.Version() + `",line="` + version.Line(cliVersion) + `",program="worker",version="` + cliVersion + `"} 1`; !strings.Contains(string(body), want) {
		t.Fatalf("the worker's /metrics lacks %s", want)
	}
}

// A command whose rollout no worker polls for says so within --timeout
// (exit 9) instead of waiting forever; so does status.
func TestCLISaysWhenNoWorkerPolls(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	bin := os.Getenv("SLUICE_BIN")
	queue := "sluice-nobody-polls"
	if out, code := sluiceCode(t, bin, "start", "nobody", "nobody-00001", "--task-queue", queue); code != 0 {
		t.Fatalf("sluice start on a queue no worker polls: %d\n%s", code, out)
	}
	t.Cleanup(func() {
		_ = c.Temporal.TerminateWorkflow(context.Background(), api.RolloutID(svcTarget("nobody").In(c.Cluster)), "", "test done")
	})
	want := "no sluice worker polls the task queue " + queue
	for _, args := range [][]string{
		{"promote", "nobody", "--task-queue", queue, "--timeout", "2s"},
		{"status", "nobody", "--task-queue", queue, "--timeout", "2s"},
	} {
		out, code := sluiceCode(t, bin, args...)
		if code != 9 || !strings.Contains(out, want) {
			t.Errorf("sluice %s: exit %d, want 9 saying %q:\n%s", strings.Join(args, " "), code, want, out)
		}
	}
}
