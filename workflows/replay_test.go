package workflows

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/api"
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
// These are the one baseline; a change to the workflow that would break
// rollouts already running — a command added, removed or reordered without
// a version gate (docs/operations.md) — fails here with a non-determinism
// error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: api.RolloutWorkflow})
			r.RegisterWorkflowWithOptions(Wave, workflow.RegisterOptions{Name: api.WaveWorkflow})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
