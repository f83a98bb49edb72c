package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/config"
)

// shortcut turns the plan into one write to 100%, with no analysis and no
// wave plan, when going back is known to be safe: an undo, which a person
// asked for, or a candidate whose template had 100% of the traffic within
// the rollback window (a revert). The capacity plan stays: the Revision may
// have scaled to zero since.
func (r *rollout) shortcut(revert *config.Stint) {
	switch {
	case r.st.Undo != nil:
		r.st.Shortcut = fmt.Sprintf("undo by %s: %s; %s gets 100%% again in one write", r.st.Undo.By, r.st.Undo.Reason, r.st.Candidate)
	case revert != nil && revert.Until.IsZero():
		r.st.Shortcut = fmt.Sprintf("%s runs the same template as %s, which has 100%% of the traffic now; one write, no steps or analysis (%s: %s)",
			r.st.Candidate, revert.Revision, config.AnnotationRollbackWindow, r.st.Policy.RollbackWindow)
	case revert != nil:
		r.st.Shortcut = fmt.Sprintf("%s runs the same template as %s, which had 100%% of the traffic until %s, within the rollback window of %s; one write, no steps or analysis",
			r.st.Candidate, revert.Revision, revert.Until.UTC().Format(time.RFC3339), r.st.Policy.RollbackWindow)
	default:
		return
	}
	r.st.Policy.Steps = []config.Step{{Weight: 100}}
	r.st.Policy.Analysis = nil
	r.st.Policy.Waves = nil
	if c := r.st.Policy.Capacity; c != nil && c.StepsFromPods {
		// One stage, not steps that follow the pods: the Revision gets
		// the stable's pods first, then all the traffic in one write.
		one := *c
		one.StepsFromPods = false
		r.st.Policy.Capacity = &one
	}
}

// recordStable writes on the traffic object that the stable Revision had
// 100% of the traffic until now, when a rollout has given it to its
// candidate: what `sluice undo` goes back to and the rollback window
// compares with. An undo records nothing there — the Revision it left is
// not known to be good — but marks that Revision ended, so its own events
// do not roll it out again. Rollouts recorded before this write existed
// replay without it.
func (r *rollout) recordStable(ctx workflow.Context) {
	if r.st.Stable == "" || r.st.Stable == r.st.Candidate || r.st.Object.Name == "" {
		return
	}
	if workflow.GetVersion(ctx, "record-stable", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	if r.st.Undo != nil {
		r.markEnded(ctx, r.st.Stable, outcomeUndone)
		return
	}
	in := activities.RecordInput{Object: r.st.Object, Revision: r.st.Stable, Until: workflow.Now(ctx)}
	if err := workflow.ExecuteActivity(readOptions(ctx, "record "+r.st.Stable+" in "+r.st.Object.String()+"'s history"), a.RecordStable, in).Get(ctx, nil); err != nil {
		r.st.Reason += fmt.Sprintf("; %s could not be recorded in %s's %s (%s), so sluice undo must name it with --to",
			r.st.Stable, r.st.Object, config.AnnotationStableHistory, errorMessage(err))
	}
}

// outcomeUndone marks a Revision an undo took the traffic from.
const outcomeUndone = "Undone"
