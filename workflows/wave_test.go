package workflows

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// A rollout whose join reaches the wave while the wave, having failed,
// waits for its last progress event is still told to stop: the wave's
// signal loop reads that join, and the wave answers it before it ends.
func TestWaveAnswersAJoinThatArrivesAsItEnds(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Wave, workflow.RegisterOptions{Name: api.WaveWorkflow})
	env.RegisterActivity(&activities.Activities{})
	join := func(cluster string) api.WaveMember {
		return api.WaveMember{Cluster: cluster, WorkflowID: "rollout/" + cluster + "/default/service/hello", Candidate: "hello-00002", Event: api.MemberJoined}
	}
	env.OnActivity(a.EmitProgress, mock.Anything, mock.Anything).Return(func(_ context.Context, p events.Progress) error {
		if p.Type == events.WaveFailed {
			// West's join, delivered while the wave waits for this event.
			env.SignalWorkflow(api.SignalWaveMember, join("west"))
		}
		return nil
	})
	var mu sync.Mutex
	told := map[string][]string{}
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", api.SignalWaveVerdict, mock.Anything).Return(
		func(_, id, _, _ string, arg any) error {
			mu.Lock()
			defer mu.Unlock()
			told[id] = append(told[id], arg.(api.WaveVerdict).Verdict)
			return nil
		})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalWaveMember, join("east")) }, 0)
	env.RegisterDelayedCallback(func() {
		ended := join("east")
		ended.Event, ended.Outcome, ended.Reason = api.MemberEnded, string(api.OutcomeRolledBack), "analysis: success-rate failed"
		env.SignalWorkflow(api.SignalWaveMember, ended)
	}, 1)
	env.ExecuteWorkflow(Wave, api.WaveStart{Target: knative.TargetRef{Namespace: "default", Kind: knative.KindService, Name: "hello"}, Release: "r1",
		Plan: config.Waves{Waves: []config.Wave{{Clusters: []string{"east"}}, {Clusters: []string{"west"}}}, OnFailure: config.OnFailureStop}})
	if !env.IsWorkflowCompleted() {
		t.Fatal("the wave did not end")
	}
	var res api.WaveResult
	if err := env.GetWorkflowResult(&res); err != nil || res.Outcome != api.WaveFailed {
		t.Fatalf("wave ended %+v (%v)", res, err)
	}
	if got := told["rollout/west/default/service/hello"]; len(got) != 1 || got[0] != api.VerdictStop {
		t.Fatalf("west was told %v, want one stop (all told: %v)", got, told)
	}
	if got := told["rollout/east/default/service/hello"]; len(got) != 1 || got[0] != api.VerdictRelease {
		t.Fatalf("east was told %v, want its release only", got)
	}
}
