package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/eventsink"
)

// waveClusters runs east and west on one Temporal server, each with a
// Service hello whose policy carries plan.
func waveClusters(t *testing.T, plan string) (east, west *stack) {
	t.Helper()
	east, west, _ = waveClustersWithSink(t, plan, "")
	return east, west
}

// waveClustersGated is waveClusters where the gated cluster's rollout
// waits at a manual gate before 100%: a test's abort reaches it there,
// however slow the machine, and not after it has reached 100% on a 1 s hold.
func waveClustersGated(t *testing.T, plan, gated string) (east, west *stack) {
	t.Helper()
	east, west, _ = waveClustersWithSink(t, plan, gated)
	return east, west
}

// waveClustersWithSink is waveClusters whose workers send progress events
// to one sink.
func waveClustersWithSink(t *testing.T, plan, gated string) (east, west *stack, snk *eventsink.Sink) {
	t.Helper()
	opts := temporalServer(t)
	snk = eventsink.New(t)
	sender, err := events.NewSender(snk.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := func(cluster string) map[string]string {
		p := map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1s", config.AnnotationWaves: plan}
		if cluster == gated {
			p[config.AnnotationGates] = "100"
		}
		return p
	}
	east = startWorker(t, opts, "east", sender, helloService(policy("east"))...)
	west = startWorker(t, opts, "west", sender, helloService(policy("west"))...)
	if _, err := east.ctl.Setup(context.Background(), opts.Namespace); err != nil {
		t.Fatal(err)
	}
	return east, west, snk
}

// startBoth starts the rollout of hello-00002 in both clusters.
func startBoth(t *testing.T, east, west *stack) context.Context {
	t.Helper()
	ctx := context.Background()
	for _, s := range []*stack{east, west} {
		if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
			t.Fatal(err)
		}
	}
	return ctx
}

func waveOf(t *testing.T, c client.Client, s *stack) (string, api.WaveStatus) {
	t.Helper()
	var st api.WaveStatus
	w := s.status().Wave
	if w == nil {
		t.Fatal("the rollout has no wave")
	}
	v, err := c.QueryWorkflow(context.Background(), w.ID, "", api.QueryStatus)
	if err != nil {
		t.Fatalf("wave status: %v", err)
	}
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	return w.ID, st
}

// A good release goes wave by wave: west's traffic does not move until
// east is at 100% and has soaked; then both end Succeeded together.
func TestWavesReleaseClusterByCluster(t *testing.T) {
	east, west, snk := waveClustersWithSink(t, "waves:\n- {clusters: [east], soak: 3s}\n- {clusters: [west]}\n", "")
	ctx := context.Background()
	// west's template lands first: it must wait for east all the same.
	if _, err := west.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "west waiting for its wave", func() bool { return west.status().Phase == api.PhaseWaitingWave })
	time.Sleep(2 * time.Second)
	if st := west.status(); st.Weight != 0 || st.Steps[0].StartedAt.IsZero() == false {
		t.Fatalf("west moved before its wave: weight %d, %+v", st.Weight, st.Steps[0])
	}
	if _, err := east.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*stack{"east": east, "west": west} {
		res, err := s.ctl.Wait(ctx, hello)
		if err != nil || res.Outcome != api.OutcomeSucceeded || !strings.Contains(res.Reason, "release") {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		if got := knative.FormatTraffic(s.liveTraffic()); !strings.Contains(got, "hello-00002=100%") {
			t.Fatalf("%s: traffic %s", name, got)
		}
	}
	id, wave := waveOf(t, east.temporal, east)
	eastSt, westSt := east.status(), west.status()
	reached := wave.Members[0].ReachedAt
	if wave.Outcome != api.WaveSucceeded || len(wave.Members) != 2 || reached.IsZero() ||
		westSt.Steps[0].StartedAt.Before(reached.Add(3*time.Second)) || !eastSt.Steps[0].StartedAt.Before(westSt.Steps[0].StartedAt) {
		t.Fatalf("wave %s: %+v\neast step 1 at %s, west step 1 at %s", id, wave, eastSt.Steps[0].StartedAt, westSt.Steps[0].StartedAt)
	}
	t.Logf("east reached 100%% at %s; west's first step at %s (soak 3s)", reached.Format(time.StampMilli), westSt.Steps[0].StartedAt.Format(time.StampMilli))
	// The wave's own progress events: each wave released, then the end.
	var waveEvents []string
	for _, e := range snk.Events() {
		if strings.HasPrefix(e.Type(), events.WavePrefix) {
			var d events.ProgressData
			if err := e.DataAs(&d); err != nil || d.Wave == nil || e.Source() != "/sluice/waves/default/service/hello" || e.Subject() != d.Wave.Release {
				t.Fatalf("wave event %s: %v, %+v", e.Type(), err, d)
			}
			waveEvents = append(waveEvents, fmt.Sprintf("%s %d/%d %v", strings.TrimPrefix(e.Type(), events.WavePrefix), d.Wave.Wave, d.Wave.Waves, d.Wave.Clusters))
		}
	}
	if got := strings.Join(waveEvents, "; "); got != "released 1/2 [east]; released 2/2 [west]; succeeded 2/2 [west]" {
		t.Fatalf("wave events: %s", got)
	}
	// The CLI shows the wave from either cluster, and each rollout's part.
	out, code := west.cli("wave", "status", "hello")
	if code != 0 || !strings.Contains(out, "Outcome:  Succeeded: release ") || !strings.Contains(out, "east (soak 3s) → west; on failure: stop") ||
		!strings.Contains(out, "  1     east     hello-00002") || !strings.Contains(out, "  2     west     hello-00002") {
		t.Fatalf("sluice wave status:\n%s", out)
	}
	t.Logf("sluice wave status hello:\n%s", out)
	if out, code := west.cli("status", "hello", "--cluster", "west"); code != 0 || !strings.Contains(out, "2 of 2, release ") {
		t.Fatalf("sluice status --cluster west:\n%s", out)
	}
	// The histories replayed for waves: a rollout that waited for its
	// release, and the wave (workflows/testdata).
	recordWorkflow(t, west.temporal, api.RolloutID(hello.In("west")), "", "rollout-wave.json")
	recordWorkflow(t, east.temporal, id, "", "wave.json")
}

// A failure in wave 1 stops wave 2 before it gets any traffic.
func TestWaveFailureStopsLaterWaves(t *testing.T) {
	east, west := waveClustersGated(t, "waves:\n- {clusters: [east]}\n- {clusters: [west]}\n", "east")
	ctx := startBoth(t, east, west)
	eventually(t, 20*time.Second, "west waiting for its wave", func() bool { return west.status().Phase == api.PhaseWaitingWave })
	eventually(t, 30*time.Second, "east released, at its gate", func() bool {
		st := east.status()
		return st.Wave != nil && st.Wave.Released && st.Phase == api.PhaseGate
	})
	if _, err := east.ctl.Send(ctx, hello, api.CommandAbort, "bad canary"); err != nil {
		t.Fatal(err)
	}
	res, err := west.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeAborted || !strings.Contains(res.Reason, "wave plan: not released: wave 1 failed in cluster east: hello-00002 Aborted") {
		t.Fatalf("west: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(west.liveTraffic()); got != "hello-00001=100%, hello-00001=0% (tag current)" {
		t.Fatalf("west's traffic: %s", got)
	}
	if _, wave := waveOf(t, east.temporal, west); wave.Outcome != api.WaveFailed {
		t.Fatalf("wave: %+v", wave)
	}
}

// With onFailure: rollback, a failure in wave 2 rolls wave 1 back too: east
// waited at 100% for the plan to end.
func TestWaveFailureRollsBackEarlierWaves(t *testing.T) {
	east, west := waveClustersGated(t, "waves:\n- {clusters: [east]}\n- {clusters: [west]}\nonFailure: rollback\n", "west")
	ctx := startBoth(t, east, west)
	eventually(t, 30*time.Second, "east at 100% waiting for the wave", func() bool { return east.status().Phase == api.PhaseWaveHold })
	eventually(t, 30*time.Second, "west released, at its gate", func() bool {
		st := west.status()
		return st.Wave != nil && st.Wave.Released && st.Phase == api.PhaseGate
	})
	if _, err := west.ctl.Send(ctx, hello, api.CommandAbort, "errors in west"); err != nil {
		t.Fatal(err)
	}
	res, err := east.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "wave plan: wave 2 failed in cluster west: hello-00002 Aborted") {
		t.Fatalf("east: %+v, %v", res, err)
	}
	for name, s := range map[string]*stack{"east": east, "west": west} {
		if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=100%, hello-00001=0% (tag current)" {
			t.Fatalf("%s's traffic: %s", name, got)
		}
	}
}

// A pipeline pauses and resumes the wave with CloudEvents, and a person
// ends a long soak from the CLI (each recorded with who and why); the wave
// then releases the next one.
func TestWaveCommandsFromTheCLI(t *testing.T) {
	east, west := waveClusters(t, "waves:\n- {clusters: [east], soak: 1h}\n- {clusters: [west]}\n")
	ctx := startBoth(t, east, west)
	eventually(t, 30*time.Second, "east soaking", func() bool {
		if east.status().Phase != api.PhaseWaveHold {
			return false
		}
		_, wave := waveOf(t, east.temporal, east)
		return wave.Phase == api.WaveSoaking
	})
	// A pipeline pauses and resumes the wave with CloudEvents.
	url := east.serveReceiver(t, nil)
	if code, msg := postCommand(t, url, events.TypeWavePause, `{"target":"hello","namespace":"default","requester":"release-bot","reason":"freeze"}`, commandToken); code != 200 {
		t.Fatalf("wave pause event: %d %s", code, msg)
	}
	eventually(t, 10*time.Second, "the wave paused", func() bool { _, w := waveOf(t, east.temporal, east); return w.Paused })
	if code, msg := postCommand(t, url, events.TypeWaveAbort, `{"target":"hello","namespace":"default"}`, commandToken); code != 400 || !strings.Contains(msg, "data.reason is required") {
		t.Fatalf("wave abort event without a reason: %d %s", code, msg)
	}
	if code, msg := postCommand(t, url, events.TypeWaveResume, `{"target":"hello","namespace":"default"}`, commandToken); code != 200 || !strings.Contains(msg, "sent resume to wave wave/default/service/hello/") {
		t.Fatalf("wave resume event: %d %s", code, msg)
	}
	if out, code := east.cli("wave", "abort", "hello"); code == 0 || !strings.Contains(out, "abort needs --reason") {
		t.Fatalf("abort without a reason: %d\n%s", code, out)
	}
	if out, code := east.cli("wave", "promote", "hello", "--reason", "canary looks fine"); code != 0 {
		t.Fatalf("wave promote: %d\n%s", code, out)
	}
	for name, s := range map[string]*stack{"east": east, "west": west} {
		if res, err := s.ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
	}
	_, wave := waveOf(t, east.temporal, east)
	if len(wave.Commands) != 3 || wave.Commands[0].Name != api.CommandPause || wave.Commands[0].By != "release-bot (via token:pipeline)" ||
		wave.Commands[1].Name != api.CommandResume || wave.Commands[2].Name != api.CommandPromote || wave.Commands[2].By != "cli@test" || wave.Commands[2].Reason != "canary looks fine" {
		t.Fatalf("wave commands: %+v", wave.Commands)
	}
}

// A gate holds the next wave, after the soak, until a person promotes.
func TestWaveGateWaitsForAPerson(t *testing.T) {
	east, west := waveClusters(t, "waves:\n- {clusters: [east], soak: 1s, gate: true}\n- {clusters: [west]}\n")
	ctx := startBoth(t, east, west)
	eventually(t, 30*time.Second, "the wave at its gate", func() bool {
		if east.status().Phase != api.PhaseWaveHold {
			return false
		}
		_, wave := waveOf(t, east.temporal, east)
		return wave.Phase == api.WaveGate
	})
	time.Sleep(2 * time.Second)
	if st := west.status(); st.Phase != api.PhaseWaitingWave || st.Weight != 0 {
		t.Fatalf("west went past the gate: %s at %d%%", st.Phase, st.Weight)
	}
	if out, code := west.cli("wave", "promote", "hello", "--reason", "canary reviewed"); code != 0 {
		t.Fatalf("wave promote: %d\n%s", code, out)
	}
	for name, s := range map[string]*stack{"east": east, "west": west} {
		if res, err := s.ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
	}
}
