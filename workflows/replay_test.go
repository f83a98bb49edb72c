package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// TestReplayRecordedHistories replays histories recorded from real rollouts
// (v0-*: before the "cloudevents" version gate; vN-*: at its version N — the
// rollouts started by older sluice releases; the rest at the latest version,
// rollout-analysis.json with checks and every kind of webhook,
// rollout-drift-resume.json with a hand edit noticed by the hold's watch and
// a resume that re-reads the live traffic)
// on a Temporal server (see test/integration, SLUICE_RECORD_HISTORY). A
// change to the workflow that would break rollouts already running — a
// command added, removed or reordered without a workflow.GetVersion gate —
// fails here with a non-determinism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
