package workflows

import (
	"slices"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Workflow changes behind a version gate (workflow.GetVersion) that the
// previous release cannot replay. A worker that keeps the way back open
// (settings.ChangesCompatible, the default) records their old path for
// the rollouts it starts, as a version marker the previous release skips;
// the next release, which every worker of this one can replay, takes them
// by default. A gate the previous release replays whatever path is
// recorded (record-stable: its new path comes only at a rollout's end) is
// not listed.
var incompatibleChanges = []string{progressLocal}

// KeepRollbackOpen is the worker option that makes new rollouts record the
// old path of every change in incompatibleChanges; others take their newest.
func KeepRollbackOpen(in worker.PreferredVersionProviderInput) *worker.VersionPreference {
	if slices.Contains(incompatibleChanges, in.ChangeID) {
		return &worker.VersionPreference{Version: workflow.DefaultVersion}
	}
	return nil
}
