package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/workflows"
)

// TestTemporalUIShowsRollout opens a rollout's page in the Temporal UI with
// a real headless Chromium (Debian's) and checks that the UI reads like a
// rollout dashboard: the summary names the Revisions, and the current
// details show the step table. It saves a screenshot as a test artifact
// (SLUICE_ARTIFACTS, or the test's temporary directory).
func TestTemporalUIShowsRollout(t *testing.T) {
	chromium := os.Getenv("SLUICE_CHROMIUM_BIN")
	if chromium == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("SLUICE_CHROMIUM_BIN is not set: run the tests with `make test`, which installs chromium")
		}
		t.Skip("SLUICE_CHROMIUM_BIN is not set")
	}
	c := ctl(t)
	firstRollout(t, c, "ui", map[string]string{"sluice.dev/steps": "25,50,100", "sluice.dev/hold": "1s", "sluice.dev/gates": "100"})
	deploy(t, "ui", "example.com/ui:v2", nil, nil)
	waitStatus(t, c, svcTarget("ui"), 60*time.Second, "the gate", func(s workflows.Status) bool {
		return s.Candidate == "ui-00002" && s.Phase == workflows.PhaseGate
	})
	id := workflows.WorkflowID(svcTarget("ui"))
	desc, err := c.Temporal.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	page := stk.UIURL + "/namespaces/default/workflows/" + url.PathEscape(id) + "/" + desc.WorkflowExecutionInfo.Execution.RunId + "/history"

	artifacts := os.Getenv("SLUICE_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	browse := func(extra ...string) string {
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir(), "--window-size=1440,1300", "--virtual-time-budget=20000"}, extra...)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, chromium, append(args, page)...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", extra, err)
		}
		return string(out)
	}
	var dom string
	deadline := time.Now().Add(60 * time.Second)
	for {
		dom = browse("--dump-dom")
		if strings.Contains(dom, "ui: ui-00001 → ui-00002") && strings.Contains(dom, "AwaitingPromotion") && strings.Contains(dom, "<table") {
			break
		}
		if time.Now().After(deadline) {
			_ = os.WriteFile(filepath.Join(artifacts, "temporal-ui-rollout.html"), []byte(dom), 0o644)
			t.Fatalf("the Temporal UI page of %s does not show the summary and the step table; its DOM is in %s", id, artifacts)
		}
		time.Sleep(time.Second)
	}
	shot := filepath.Join(artifacts, "temporal-ui-rollout.png")
	browse("--screenshot=" + shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}
