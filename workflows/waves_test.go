package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

// A rollout of a wave plan under the test clock: it joins, waits past its
// deadline for the release (paused and resumed meanwhile, without spinning),
// runs its steps once released with a fresh deadline, waits at 100% and ends
// when the wave says done — telling the wave as it goes.
func TestWaveRolloutWaitsForReleaseAndTheEnd(t *testing.T) {
	plan := "waves:\n- {clusters: [east]}\n- {clusters: [west]}\n"
	h := newHarnessIn(t, "west", helloObjects(map[string]string{config.AnnotationWaves: plan}, true)...)
	var joined activities.JoinWaveInput
	h.env.OnActivity(a.JoinWave, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.JoinWaveInput) (activities.JoinWaveResult, error) {
			joined = in
			return activities.JoinWaveResult{}, nil
		})
	var told []string
	h.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", api.SignalWaveMember, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			told = append(told, arg.(api.WaveMember).Event)
			return nil
		})
	verdict := func(v, reason string) func() {
		return func() {
			h.env.SignalWorkflow(api.SignalWaveVerdict, api.WaveVerdict{Verdict: v, Reason: reason})
		}
	}
	var waiting, paused api.Status
	// The default deadline is 2h: the wave keeps the rollout waiting past it.
	h.at(3*time.Hour, func() { waiting = h.status(); h.update(api.CommandPause, api.Command{By: "ann", Reason: "freeze"}) })
	h.at(3*time.Hour+time.Minute, func() { paused = h.status(); h.update(api.CommandResume, api.Command{By: "ann"}) })
	h.at(3*time.Hour+2*time.Minute, verdict(api.VerdictRelease, "wave 2 of 2 released"))
	h.at(5*time.Hour, verdict(api.VerdictDone, "release x is at 100% in every cluster"))
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: helloTarget.In("west"), Candidate: "hello-00002", RequestedBy: "test"}})
	if !h.env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if waiting.Phase != api.PhaseWaitingWave || waiting.Weight != 0 || waiting.Wave == nil || waiting.Wave.Wave != 2 || !waiting.Wave.Joined || !paused.Paused {
		t.Fatalf("at 3h: phase %s weight %d wave %+v; paused %v", waiting.Phase, waiting.Weight, waiting.Wave, paused.Paused)
	}
	if joined.Member.Cluster != "west" || joined.Member.Event != api.MemberJoined || joined.Start.Target.Cluster != "" ||
		!strings.HasPrefix(joined.WaveID, "wave/default/service/hello/") || len(joined.Start.Plan.Waves) != 2 {
		t.Fatalf("joined with %+v", joined)
	}
	res := h.result()
	if res.Outcome != api.OutcomeSucceeded || !strings.Contains(res.Reason, "hello-00002 has 100% of the traffic that hello-00001 had; release x is at 100% in every cluster") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if got := strings.Join(told, ","); got != "reached,ended" {
		t.Fatalf("told the wave: %s", got)
	}
}

// A stop before release ends the rollout Aborted where it began.
func TestWaveStopBeforeRelease(t *testing.T) {
	plan := "waves:\n- {clusters: [east]}\n- {clusters: [west]}\n"
	h := newHarnessIn(t, "west", helloObjects(map[string]string{config.AnnotationWaves: plan}, true)...)
	h.env.OnActivity(a.JoinWave, mock.Anything, mock.Anything).Return(activities.JoinWaveResult{}, nil)
	h.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", api.SignalWaveMember, mock.Anything).Return(nil)
	h.at(time.Minute, func() {
		h.env.SignalWorkflow(api.SignalWaveVerdict, api.WaveVerdict{Verdict: api.VerdictStop, Reason: "not released: wave 1 failed in cluster east"})
	})
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: helloTarget.In("west"), Candidate: "hello-00002", RequestedBy: "test"}})
	res := h.result()
	if res.Outcome != api.OutcomeAborted || res.Reason != "wave plan: not released: wave 1 failed in cluster east" {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if got := h.traffic("hello"); len(got) != 3 || got[0].RevisionName != "hello-00001" || *got[0].Percent != 90 {
		t.Fatalf("traffic after the stop: %+v", got)
	}
}

// A worker that names no cluster cannot take part in a plan.
func TestWavePlanNeedsACluster(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationWaves: "waves:\n- {clusters: [east]}\n- {clusters: [west]}\n"}, true)...)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, "its worker names no cluster: set SLUICE_CLUSTER") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
}

// A cluster that joins after its wave has succeeded (a rollout retried
// later) runs and ends without waiting at 100% for word that never comes.
func TestWaveJoinedAfterTheWaveSucceeded(t *testing.T) {
	plan := "waves:\n- {clusters: [east]}\n- {clusters: [west]}\n"
	h := newHarnessIn(t, "west", helloObjects(map[string]string{config.AnnotationWaves: plan}, true)...)
	h.env.OnActivity(a.JoinWave, mock.Anything, mock.Anything).Return(
		activities.JoinWaveResult{Ended: true, Result: api.WaveResult{Outcome: api.WaveSucceeded, Reason: "release x is at 100% in every cluster"}}, nil)
	h.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", api.SignalWaveMember, mock.Anything).Return(nil)
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: helloTarget.In("west"), Candidate: "hello-00002", RequestedBy: "test"}})
	if res := h.result(); res.Outcome != api.OutcomeSucceeded || !strings.Contains(res.Reason, "has ended Succeeded") {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
}
