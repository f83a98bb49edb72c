package workflows

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/capacity"
	"github.com/sluicehq/sluice/knative"
)

// The rollout's parts hold their own rules; these are the ones the main
// loop relies on without running a workflow.

func TestAnalysisStateKeepsTheNewestMeasurements(t *testing.T) {
	an := &analysisState{Tallies: []analysis.Tally{{Name: "sr", Kind: analysis.KindCheck, Limits: analysis.Limits{ConsecutiveError: 1}}}}
	for i := range maxRecent + 5 {
		an.remember([]analysis.Measurement{{Name: "sr", Step: i}})
	}
	if len(an.Recent) != maxRecent || an.Recent[0].Step != 5 || an.Recent[maxRecent-1].Step != maxRecent+4 {
		t.Fatalf("recent = %d, first step %d", len(an.Recent), an.Recent[0].Step)
	}
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	an.schedule(now, time.Minute)
	if an.due(now.Add(59*time.Second)) || !an.due(now.Add(time.Minute)) {
		t.Fatalf("due at %s", an.NextAt)
	}
	an.tally([]analysis.Measurement{{Name: "sr", Result: analysis.Error}})
	an.tally([]analysis.Measurement{{Name: "sr", Result: analysis.Error}})
	if d := an.judge(false); d.Action != analysis.Pause || an.Rounds != 1 {
		t.Fatalf("judged %+v after %d rounds", d, an.Rounds)
	}
	an.forgive(now.Add(time.Hour), time.Minute, 2, true)
	if d := an.judge(false); d.Action != analysis.Continue || an.FinalStep != 2 || an.due(now.Add(time.Hour)) {
		t.Fatalf("after forgiving: %+v, final step %d", d, an.FinalStep)
	}
	if an.nextCall() != 1 || an.nextCall() != 2 {
		t.Fatal("webhook calls are numbered from 1")
	}
	var none *analysisState
	if none.view() != nil {
		t.Fatal("no analysis shows none")
	}
}

func TestWaveStateVerdicts(t *testing.T) {
	var none *waveState
	none.note(api.WaveVerdict{Verdict: api.VerdictRollback})
	if none.holds() || none.released() || none.rollbackHeard() || none.view() != nil {
		t.Fatal("a rollout without a wave plan is never held by one")
	}
	wv := &waveState{ID: "w", Release: "r1", Wave: 2}
	if !wv.holds() || wv.heard() {
		t.Fatal("a joined wave holds the rollout until it hears")
	}
	wv.note(api.WaveVerdict{Verdict: api.VerdictRollback, Reason: "wave 3 failed"})
	if !wv.rollbackHeard() {
		t.Fatal("a rollback verdict is heard")
	}
	if v, why := wv.take(); v != api.VerdictRollback || why != "wave 3 failed" || wv.heard() || wv.Verdict != v {
		t.Fatalf("took %s %q, pending %q", v, why, wv.Pending)
	}
	wv.joinedEnded(api.WaveResult{Outcome: api.WaveSucceeded, Reason: "all waves at 100%"})
	if wv.Pending != api.VerdictDone {
		t.Fatalf("a wave that succeeded lets the rollout run: %q", wv.Pending)
	}
	wv.joinedEnded(api.WaveResult{Outcome: api.WaveFailed})
	if wv.Pending != api.VerdictDone {
		t.Fatal("a verdict already heard stands")
	}
	failed := &waveState{Release: "r2"}
	failed.joinedEnded(api.WaveResult{Outcome: api.WaveFailed, Reason: "west rolled back"})
	if failed.Pending != api.VerdictStop || failed.PendingReason != "the wave of release r2 has ended Failed: west rolled back" {
		t.Fatalf("joined an ended wave: %q %q", failed.Pending, failed.PendingReason)
	}
}

func TestCapacityStateCarriesTheStable(t *testing.T) {
	var none *capacityState
	if none.on() || none.carried() != nil || none.view() != nil {
		t.Fatal("no plan stages nothing")
	}
	c := &capacityState{StablePods: 8, StableBounds: knative.Pods(8), Stages: []capacity.Stage{{Weight: 50, Candidate: 4, Stable: 4}}}
	c.wrote("cand", knative.Pods(4))
	c.saw(true, 3)
	c.saw(false, 7)
	if b, ok := c.last("cand"); !ok || b != knative.Pods(4) || c.CandidatePods != 3 || c.StablePodsNow != 7 {
		t.Fatalf("wrote %+v %v, pods %d/%d", b, ok, c.CandidatePods, c.StablePodsNow)
	}
	c.forget("cand")
	if _, ok := c.last("cand"); ok {
		t.Fatal("forgotten bounds are checked no more")
	}
	kept := c.carried()
	if kept.StablePods != 8 || kept.StableBounds != knative.Pods(8) || kept.on() || kept.Written != nil {
		t.Fatalf("a superseding candidate keeps the stable's count and bounds only: %+v", kept)
	}
	if v := c.view(); v == nil || v.StablePods != 8 || v.CandidatePods != 3 || len(v.Stages) != 1 {
		t.Fatalf("view %+v", v)
	}
}
