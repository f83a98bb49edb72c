package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
)

type wave struct {
	st      api.WaveStatus
	promote bool
	abort   *api.CommandRecord
	// seq numbers progress events; sent are their activities, waited for
	// before the wave ends so the last is not lost.
	seq  int
	sent []workflow.Future
}

// Wave releases a target's release cluster by cluster, as its plan says:
// each wave's rollouts are released once all of them have joined (each
// holds before its first step), the next wave waits until every rollout of
// this one is at 100% and the soak has passed. A rollout that ends any
// other way fails the wave: the later waves' rollouts are stopped, and the
// released ones keep the candidate or, by the plan, roll back. It does no
// I/O of its own: it signals rollouts and waits.
func Wave(ctx workflow.Context, in api.WaveStart) (api.WaveResult, error) {
	w := &wave{st: api.WaveStatus{WaveStart: in, Phase: api.WaveWaiting, Current: 1}}
	for i, wv := range in.Plan.Waves {
		for _, c := range wv.Clusters {
			w.st.Members = append(w.st.Members, api.WaveMemberStatus{Cluster: c, Wave: i + 1})
		}
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, func() (api.WaveStatus, error) { return w.st, nil }); err != nil {
		return api.WaveResult{}, err
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			w.signals(ctx).Select(ctx)
		}
	})
	failure := ""
	for i, wv := range in.Plan.Waves {
		w.st.Current, w.st.Phase = i+1, api.WaveWaiting
		w.details(ctx)
		_ = workflow.Await(ctx, func() bool { return w.failed() != "" || w.abort != nil || (w.joined(i) && !w.st.Paused) })
		if failure = w.stopping(); failure != "" {
			break
		}
		w.st.Phase = api.WaveRolling
		released := fmt.Sprintf("wave %d of %d released: %s", i+1, len(in.Plan.Waves), strings.Join(wv.Clusters, ", "))
		w.tell(ctx, func(m api.WaveMemberStatus) bool { return m.Wave == i+1 }, api.VerdictRelease, released)
		w.emit(ctx, events.WaveReleased, released, "")
		w.details(ctx)
		for j := range w.st.Members {
			if w.st.Members[j].Wave == i+1 {
				w.st.Members[j].ReleasedAt = workflow.Now(ctx)
			}
		}
		_ = workflow.Await(ctx, func() bool { return w.failed() != "" || w.abort != nil || w.reached(i) })
		if failure = w.stopping(); failure != "" {
			break
		}
		if i == len(in.Plan.Waves)-1 {
			continue
		}
		if wv.Soak > 0 {
			w.st.Phase, w.st.SoakUntil = api.WaveSoaking, workflow.Now(ctx).Add(wv.Soak)
			w.details(ctx)
			_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: wv.Soak, TimerOptions: workflow.TimerOptions{Summary: fmt.Sprintf("soak wave %d for %s", i+1, wv.Soak)}},
				func() bool { return w.failed() != "" || w.abort != nil || w.promote })
			w.promote, w.st.SoakUntil = false, time.Time{}
		}
		if wv.Gate && w.stopping() == "" {
			w.st.Phase = api.WaveGate
			w.details(ctx)
			_ = workflow.Await(ctx, func() bool { return w.failed() != "" || w.abort != nil || w.promote })
			w.promote = false
		}
		if failure = w.stopping(); failure != "" {
			break
		}
	}
	if failure == "" {
		w.st.Phase, w.st.Outcome = api.WaveSucceeded, api.WaveSucceeded
		w.st.Reason = fmt.Sprintf("release %s is at 100%% in every cluster: %s", in.Release, strings.Join(in.Plan.Clusters(), ", "))
		w.tell(ctx, func(m api.WaveMemberStatus) bool { return m.WorkflowID != "" && m.EndedAt.IsZero() }, api.VerdictDone, w.st.Reason)
		w.emit(ctx, events.WaveSucceeded, w.st.Reason, "")
	} else {
		w.st.Phase, w.st.Outcome, w.st.Reason = api.WaveFailed, api.WaveFailed, failure
		if w.abort != nil {
			w.st.Phase, w.st.Outcome = api.WaveAborted, api.WaveAborted
		}
		back := w.abort != nil || in.Plan.OnFailure == config.OnFailureRollback
		w.tell(ctx, func(m api.WaveMemberStatus) bool {
			return m.WorkflowID != "" && m.EndedAt.IsZero() && m.ReleasedAt.IsZero()
		},
			api.VerdictStop, "not released: "+failure)
		released := func(m api.WaveMemberStatus) bool { return m.EndedAt.IsZero() && !m.ReleasedAt.IsZero() }
		if back {
			w.tell(ctx, released, api.VerdictRollback, failure)
		} else {
			w.tell(ctx, released, api.VerdictDone, failure+"; the plan keeps the candidate where it was released")
		}
		typ, by := events.WaveFailed, ""
		if w.abort != nil {
			typ, by = events.WaveAborted, w.abort.By
		}
		w.emit(ctx, typ, failure, by)
	}
	// A rollout that joined as the wave decided has had no word: answer it
	// too — also one whose join the signal loop read while this waited for
	// its events or answers. The wave returns only right after a round that
	// answered no one, without yielding in between, so no join read before
	// it goes unanswered; one that arrives as the wave completes makes
	// Temporal run this task again with it.
	w.answerLate(ctx, failure)
	w.details(ctx)
	for {
		for _, f := range w.sent {
			_ = f.Get(ctx, nil) // a sink that never answers loses the event, not the wave
		}
		if w.answerLate(ctx, failure) == 0 {
			break
		}
	}
	return api.WaveResult{Outcome: w.st.Outcome, Reason: w.st.Reason}, nil
}

// answerLate reads the member news not yet read and answers every rollout
// that joined but was never told anything: stopped after a failure, done
// (released, no wait at 100%) after a success. It returns how many it told.
func (w *wave) answerLate(ctx workflow.Context, failure string) int {
	var m api.WaveMember
	for workflow.GetSignalChannel(ctx, api.SignalWaveMember).ReceiveAsync(&m) {
		w.note(ctx, m)
	}
	untold := func(m api.WaveMemberStatus) bool { return m.WorkflowID != "" && m.Verdict == "" && m.EndedAt.IsZero() }
	if failure != "" {
		return w.tell(ctx, untold, api.VerdictStop, "not released: "+failure)
	}
	return w.tell(ctx, untold, api.VerdictDone, w.st.Reason)
}

// details shows the wave in the Temporal UI's current details: its phase,
// then a table of the clusters.
func (w *wave) details(ctx workflow.Context) {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s** · wave %d of %d · release %s", w.st.Phase, w.st.Current, len(w.st.Plan.Waves), w.st.Release)
	if w.st.Reason != "" {
		fmt.Fprintf(&b, "\n\n%s", w.st.Reason)
	}
	b.WriteString("\n\n| wave | cluster | candidate | released | at 100% | ended |\n|---|---|---|---|---|---|\n")
	for _, m := range w.st.Members {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s %s |\n", m.Wave, m.Cluster, m.Candidate, clock(m.ReleasedAt), clock(m.ReachedAt), m.Outcome, clock(m.EndedAt))
	}
	workflow.SetCurrentDetails(ctx, b.String())
}

// emit sends a progress event about the current wave, without waiting for
// the sink (see sent).
func (w *wave) emit(ctx workflow.Context, typ, reason, by string) {
	w.seq++
	t := w.st.Target
	if by == "" {
		by = "sluice"
	}
	p := events.Progress{
		ID: fmt.Sprintf("%s-%d", workflow.GetInfo(ctx).WorkflowExecution.RunID, w.seq), Type: typ, Time: workflow.Now(ctx),
		Data: events.ProgressData{
			Namespace: t.Namespace, Kind: t.Kind, Name: t.Name, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
			Phase: w.st.Phase, Step: w.st.Current, StepCount: len(w.st.Plan.Waves), Reason: reason, By: by, Sequence: w.seq,
			Wave: &events.ProgressWave{Release: w.st.Release, Wave: w.st.Current, Waves: len(w.st.Plan.Waves), Clusters: w.st.Plan.Waves[w.st.Current-1].Clusters},
		},
	}
	w.sent = append(w.sent, workflow.ExecuteActivity(emitOptions(ctx, "send "+typ), a.EmitProgress, p))
}

func (w *wave) signals(ctx workflow.Context) workflow.Selector {
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, api.SignalWaveMember), func(c workflow.ReceiveChannel, _ bool) {
		var m api.WaveMember
		c.Receive(ctx, &m)
		w.note(ctx, m)
	})
	for _, name := range []string{api.CommandPromote, api.CommandPause, api.CommandResume, api.CommandAbort} {
		sel.AddReceive(workflow.GetSignalChannel(ctx, name), func(c workflow.ReceiveChannel, _ bool) {
			var cmd api.Command
			c.Receive(ctx, &cmd)
			rec := api.CommandRecord{Name: name, By: cmd.By, Reason: cmd.Reason, At: workflow.Now(ctx), Via: "signal"}
			switch name {
			case api.CommandPromote:
				if w.st.Phase == api.WaveSoaking || w.st.Phase == api.WaveGate {
					w.promote = true
				} else {
					rec.Rejected = "promote ends a soak or passes a gate; the wave is " + w.st.Phase
				}
			case api.CommandPause:
				w.st.Paused = true
			case api.CommandResume:
				w.st.Paused = false
			case api.CommandAbort:
				if w.abort == nil {
					w.abort = &rec
				}
			}
			w.st.Commands = append(w.st.Commands, rec)
		})
	}
	return sel
}

// note records what a rollout said. A cluster outside the plan, or a
// second rollout of a cluster (a supersede started it anew), replaces
// nothing it should not: the newest rollout of a cluster is its member.
func (w *wave) note(ctx workflow.Context, m api.WaveMember) {
	for i := range w.st.Members {
		ms := &w.st.Members[i]
		if ms.Cluster != m.Cluster {
			continue
		}
		now := workflow.Now(ctx)
		switch m.Event {
		case api.MemberJoined:
			ms.WorkflowID, ms.Candidate, ms.JoinedAt = m.WorkflowID, m.Candidate, now
		case api.MemberReached:
			ms.ReachedAt = now
		case api.MemberEnded:
			ms.EndedAt, ms.Outcome, ms.Reason = now, m.Outcome, m.Reason
		}
		return
	}
}

func (w *wave) joined(i int) bool {
	for _, m := range w.st.Members {
		if m.Wave == i+1 && m.JoinedAt.IsZero() {
			return false
		}
	}
	return true
}

func (w *wave) reached(i int) bool {
	for _, m := range w.st.Members {
		if m.Wave == i+1 && m.ReachedAt.IsZero() {
			return false
		}
	}
	return true
}

// failed names the first rollout that ended without success, "" if none.
func (w *wave) failed() string {
	for _, m := range w.st.Members {
		if !m.EndedAt.IsZero() && m.Outcome != string(api.OutcomeSucceeded) {
			return fmt.Sprintf("wave %d failed in cluster %s: %s %s: %s", m.Wave, m.Cluster, m.Candidate, m.Outcome, m.Reason)
		}
	}
	return ""
}

// stopping is why the plan stops here, "" to go on.
func (w *wave) stopping() string {
	if w.abort != nil {
		return fmt.Sprintf("aborted by %s: %s", w.abort.By, w.abort.Reason)
	}
	return w.failed()
}

// tell sends verdict to the rollouts of the members pick selects, and waits
// for Temporal to take each signal. A rollout that has closed meanwhile
// cannot hear it and needs not to.
func (w *wave) tell(ctx workflow.Context, pick func(api.WaveMemberStatus) bool, verdict, reason string) int {
	var futures []workflow.Future
	for i := range w.st.Members {
		m := &w.st.Members[i]
		if m.WorkflowID == "" || !pick(*m) {
			continue
		}
		m.Verdict = verdict
		futures = append(futures, workflow.SignalExternalWorkflow(ctx, m.WorkflowID, "", api.SignalWaveVerdict,
			api.WaveVerdict{Verdict: verdict, Reason: reason}))
	}
	for _, f := range futures {
		_ = f.Get(ctx, nil)
	}
	return len(futures)
}
