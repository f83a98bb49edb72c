package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// waveState is a rollout's part in its target's wave plan: the wave it is
// in, whether it joined and was released, and the verdicts the wave sent.
// It is carried through continue-as-new with api.WaveState's JSON, which is
// also how the status shows it.
type waveState api.WaveState

// holds reports whether the plan still holds the rollout before its first
// step; false without a plan.
func (wv *waveState) holds() bool { return wv != nil && !wv.Released }

// released reports whether the rollout runs in a plan that released it.
func (wv *waveState) released() bool { return wv != nil && wv.Released }

// heard reports whether a verdict waits to be acted on.
func (wv *waveState) heard() bool { return wv.Pending != "" }

// note records a verdict for the main loop; none without a plan.
func (wv *waveState) note(v api.WaveVerdict) {
	if wv != nil {
		wv.Pending, wv.PendingReason = v.Verdict, v.Reason
	}
}

// take acts on the pending verdict: it becomes the last one.
func (wv *waveState) take() (string, string) {
	wv.Verdict, wv.Reason, wv.Pending, wv.PendingReason = wv.Pending, wv.PendingReason, "", ""
	return wv.Verdict, wv.Reason
}

// rollbackHeard reports whether the wave sent a rollback not yet acted on.
func (wv *waveState) rollbackHeard() bool { return wv != nil && wv.Pending == api.VerdictRollback }

// joinedEnded is what joining a wave that has ended means: it will say
// nothing more, and a successful one lets the rollout run and end without
// waiting at 100%. A verdict already heard stands.
func (wv *waveState) joinedEnded(res api.WaveResult) {
	if wv.Pending != "" {
		return
	}
	wv.Pending, wv.PendingReason = api.VerdictStop, fmt.Sprintf("the wave of release %s has ended %s: %s", wv.Release, res.Outcome, res.Reason)
	if res.Outcome == api.WaveSucceeded {
		wv.Pending = api.VerdictDone
	}
}

// view is the rollout's part in its wave as the status shows it.
func (wv *waveState) view() *api.WaveState { return (*api.WaveState)(wv) }

// planWave sets up the rollout's part in its target's wave plan, or ends
// it when this worker's cluster cannot take part.
func (r *rollout) planWave(ctx workflow.Context, release string) bool {
	plan := r.st.Policy.Waves
	t := r.st.Target
	switch {
	case t.Cluster == "":
		r.finish(ctx, api.OutcomeFailed, fmt.Sprintf("%s has a wave plan (%s), but its worker names no cluster: set SLUICE_CLUSTER on each cluster's worker and receiver (docs/waves.md)", t, "sluice.dev/waves"))
		return false
	case plan.WaveOf(t.Cluster) < 0:
		r.finish(ctx, api.OutcomeFailed, fmt.Sprintf("cluster %s is in no wave of %s's plan (%v): add it, or remove the plan", t.Cluster, t, plan.Clusters()))
		return false
	}
	shared := knative.TargetRef{Namespace: t.Namespace, Kind: t.Kind, Name: t.Name}
	r.st.Wave = &waveState{ID: api.WaveID(shared, release), Release: release, Wave: plan.WaveOf(t.Cluster) + 1}
	return true
}

// awaitRelease joins the wave, then waits for its word: released, the
// steps go on (and the rollout's deadline starts now); stopped, the
// rollout ends where it began.
func (r *rollout) awaitRelease(ctx workflow.Context) {
	wv := r.st.Wave
	r.st.Phase = api.PhaseWaitingWave
	if !wv.Joined {
		t := r.st.Target
		var res activities.JoinWaveResult
		err := workflow.ExecuteActivity(readOptions(ctx, "join wave "+wv.ID), a.JoinWave, activities.JoinWaveInput{
			WaveID: wv.ID,
			Start:  api.WaveStart{Target: knative.TargetRef{Namespace: t.Namespace, Kind: t.Kind, Name: t.Name}, Release: wv.Release, Plan: *r.st.Policy.Waves},
			Member: r.member(ctx, api.MemberJoined),
		}).Get(ctx, &res)
		if err != nil {
			r.startRollback(api.OutcomeFailed, "cannot join wave "+wv.ID+": "+errorMessage(err))
			return
		}
		wv.Joined = true
		if res.Ended {
			wv.joinedEnded(res.Result)
		}
		r.publish(ctx)
	}
	if !wv.heard() {
		r.awaitFor(ctx, 0, fmt.Sprintf("wait for wave %d's release", wv.Wave), wv.heard)
		return
	}
	verdict, reason := wv.take()
	switch verdict {
	case api.VerdictRelease, api.VerdictDone:
		wv.Released = true
		r.st.Phase = api.PhaseStepping
		r.st.Deadline = workflow.Now(ctx).Add(r.st.Policy.Deadline)
		if verdict == api.VerdictDone {
			// Nothing to wait for at 100%: keep it for then.
			wv.Pending, wv.PendingReason = verdict, reason
		}
	default:
		r.startRollback(api.OutcomeAborted, "wave plan: "+reason)
	}
}

// reachWave is the last step's end in a wave plan: the wave hears the
// candidate is at 100%, and the rollout waits for the plan to end.
func (r *rollout) reachWave(ctx workflow.Context, reason string) {
	wv := r.st.Wave
	if !wv.Reached {
		wv.Reached = true
		r.tellWave(ctx, r.member(ctx, api.MemberReached))
	}
	r.st.Phase, r.st.Reason = api.PhaseWaveHold, reason
}

// awaitWaveEnd waits at 100% for the plan's end: done ends the rollout
// Succeeded; rollback (a later wave failed and the plan says so) undoes it.
func (r *rollout) awaitWaveEnd(ctx workflow.Context) {
	wv := r.st.Wave
	if !wv.heard() {
		r.awaitFor(ctx, 0, "wait at 100% for the wave plan to end", wv.heard)
		return
	}
	verdict, reason := wv.take()
	if verdict == api.VerdictRollback {
		r.startRollback(api.OutcomeRolledBack, "wave plan: "+reason)
		return
	}
	r.finish(ctx, api.OutcomeSucceeded, r.st.Reason+"; "+reason)
}

// waveRollback reports whether a rollback verdict came while the rollout
// runs: a wave failed and the plan rolls the released clusters back.
func (r *rollout) waveRollback() bool {
	return r.st.Wave.rollbackHeard() && r.st.Phase != api.PhaseRollingBack && !r.st.Phase.Done()
}

func (r *rollout) member(ctx workflow.Context, event string) api.WaveMember {
	return api.WaveMember{Cluster: r.st.Target.Cluster, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Candidate: r.st.Candidate,
		Event: event, Outcome: string(r.st.Outcome), Reason: r.st.Reason}
}

// tellWave signals the wave; a wave that has closed needs no news.
func (r *rollout) tellWave(ctx workflow.Context, m api.WaveMember) {
	_ = workflow.SignalExternalWorkflow(ctx, r.st.Wave.ID, "", api.SignalWaveMember, m).Get(ctx, nil)
}

// endWave tells the wave how the rollout ended, once.
func (r *rollout) endWave(ctx workflow.Context) {
	if wv := r.st.Wave; wv != nil && wv.Joined && !wv.Told {
		wv.Told = true
		r.tellWave(ctx, r.member(ctx, api.MemberEnded))
	}
}
