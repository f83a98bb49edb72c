package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/browser"
)

// TestTemporalUIShowsRollout opens a rollout's page in the Temporal UI with
// a real headless Chromium (Debian's, driven over the DevTools protocol) and checks that the UI reads like a
// rollout dashboard: the summary names the Revisions, and the current
// details show the step table and the analysis. It saves a screenshot as a test artifact
// (SLUICE_ARTIFACTS, or the test's temporary directory).
//
// Not parallel: Chromium and the UI's server need the cores to render the
// page within its deadline, which they did not get beside three other
// scenarios on a 2-core machine.
func TestTemporalUIShowsRollout(t *testing.T) {
	if stk.UIURL == "" {
		t.Skip("this stack's Temporal has no web UI (Temporal's production topology without SLUICE_TEMPORAL_UI_SERVER): run it through `make test`, which builds Temporal's UI server")
	}
	chromium := os.Getenv("SLUICE_CHROMIUM_BIN")
	if chromium == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("SLUICE_CHROMIUM_BIN is not set: run the tests with `make test`, which installs chromium")
		}
		t.Skip("SLUICE_CHROMIUM_BIN is not set")
	}
	c := ctl(t)
	firstRollout(t, c, "ui", map[string]string{"sluice.dev/steps": "25,50,100", "sluice.dev/hold": "4s", "sluice.dev/gates": "100",
		"sluice.dev/analysis": "interval: 2s\nwindow: 5s\nchecks:\n  - {name: success-rate, builtin: success-rate, inconclusiveLimit: 3}\n"})
	deploy(t, "ui", "example.com/ui:v2", nil, nil)
	waitStatus(t, c, svcTarget("ui"), 60*time.Second, "the gate", func(s api.Status) bool {
		return s.Candidate == "ui-00002" && s.Phase == api.PhaseGate
	})
	id := api.RolloutID(svcTarget("ui"))
	desc, err := c.Temporal.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	page := stk.UIURL + "/namespaces/default/workflows/" + url.PathEscape(id) + "/" + desc.WorkflowExecutionInfo.Execution.RunId + "/user-metadata"

	artifacts := os.Getenv("SLUICE_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := browser.Start(ctx, chromium, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := b.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The summary names the Revisions; the current details are the Markdown
	// step table, rendered as a table with the rollout's phase above it, and
	// a line with who told the rollout its candidate is Ready (its event, or
	// its own watch when the candidate was Ready before the rollout looked)
	// and the check's last measurement.
	if err := waitPage(ctx, t, p, "ui: ui-00001 → ui-00002", "AwaitingPromotion", "weight", "hold", "gate",
		"· Ready by ", "· success-rate 1 ✓"); err != nil {
		html, _ := p.HTML()
		_ = os.WriteFile(filepath.Join(artifacts, "temporal-ui-rollout.html"), []byte(html), 0o644)
		_ = p.Screenshot(filepath.Join(artifacts, "temporal-ui-rollout.png"))
		t.Fatalf("the Temporal UI page of %s: %v (its DOM and a screenshot are in %s)", id, err, artifacts)
	}
	table, err := p.Eval(`Array.from(document.querySelectorAll('iframe')).some(f => {
		try { return !!f.contentDocument.querySelector('table') } catch (e) { return false } })`)
	if err != nil || table != "true" {
		t.Fatalf("the step table is not rendered as a table: %q, %v", table, err)
	}
	shot := filepath.Join(artifacts, "temporal-ui-rollout.png")
	if err := p.Screenshot(shot); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}

// uiErrorPage is what the Temporal UI shows when its server could not
// answer the page's first request (seen once under a loaded machine: its
// call to Temporal timed out); the page offers "Try a refresh".
const uiErrorPage = "Uh oh. There's an error."

// waitPage waits until the page shows every one of want, reloading it, as
// a person would, whenever it shows the UI's error page instead.
func waitPage(ctx context.Context, t *testing.T, p *browser.Page, want ...string) error {
	t.Helper()
	for {
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		text, err := p.WaitText(wait, want...)
		timedOut := wait.Err() != nil
		cancel()
		switch {
		case err == nil || ctx.Err() != nil || !timedOut:
			return err
		case strings.Contains(text, uiErrorPage):
			t.Logf("the Temporal UI showed its error page; reloading it")
			if _, err := p.Eval("location.reload()"); err != nil {
				return fmt.Errorf("reload the page after the UI's error page: %w", err)
			}
		}
	}
}
