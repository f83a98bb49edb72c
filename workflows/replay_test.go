package workflows

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/version"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplayRecordedHistories replays histories recorded from real rollouts
// on a Temporal server (test/integration with SLUICE_RECORD_HISTORY set):
// gate + promote, abort, rollback on a verify timeout, analysis with
// checks and webhooks, comparison checks whose round scores 50 and rolls
// back, a hand edit during a hold and its resume, a rollout
// driven by CloudEvents (its readiness told by a candidate signal), a
// capacity rollout (scale writes and pod waits per stage), a capacity
// abort (the stable's pods back first, the candidate released once in
// reserve), a rollout of a wave plan (joined, held until released, at 100%
// until the plan ended) and its wave, a policy refused before any traffic
// moved (its failed progress event sent all the same), and a supersede — the run that continues as new and the run it
// starts.
//
// Histories live in testdata/histories/<set>: "baseline" was recorded while
// the workflow took its first shape, and each release adds a fresh set of
// its own when it is cut (make record-histories). Every set is kept and
// replayed by every later build: a change to the workflow that would break
// rollouts already running — a command added, removed or reordered
// without a version gate (docs/operations.md) — fails here with a
// non-determinism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/histories/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata/histories: %v", err)
	}
	for _, f := range files {
		name := strings.TrimPrefix(filepath.ToSlash(f), "testdata/histories/")
		t.Run(name, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: api.RolloutWorkflow})
			r.RegisterWorkflowWithOptions(Wave, workflow.RegisterOptions{Name: api.WaveWorkflow})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// TestEveryReleaseHasHistories: each release named in release/releases.txt,
// and the VERSION file's when the tree is a release, has its set of
// histories, so no release's rollouts go unreplayed.
func TestEveryReleaseHasHistories(t *testing.T) {
	releases, err := version.ReadReleases("..")
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, r := range releases {
		versions = append(versions, r.Version)
	}
	cur, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(cur)); version.IsRelease(v) {
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		t.Fatal("neither release/releases.txt nor VERSION names a release")
	}
	for _, v := range versions {
		files, _ := filepath.Glob(filepath.Join("testdata", "histories", v, "*.json"))
		if len(files) < 10 {
			t.Errorf("release %s has %d recorded histories in testdata/histories/%s, want one per rollout shape (make record-histories)", v, len(files), v)
		}
	}
}
