package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"time"

	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
	"github.com/sluicehq/sluice/version"
	"github.com/sluicehq/sluice/workflows/control"
)

// upgradeCase is one rollout put into a state a rollout waits in, before
// sluice is replaced under it, and what ends it afterwards.
type upgradeCase struct {
	state string
	ann   map[string]string // the Service's policy
	tmpl  map[string]string // both Revisions' template annotations
	next  map[string]string // the candidate's own, over tmpl
	// reach says the rollout waits in its state; put, if set, then puts
	// it there (a pause, a hand edit) and reached says it is.
	reach   func(name string, s api.Status) bool
	put     func(t *testing.T, name string)
	reached func(name string, s api.Status) bool
	// finish are the commands after the replacement that end it, if any
	// (each with the Service's name after the verb).
	finish [][]string
	want   api.Outcome
}

// upgradeCases are the states a rollout waits in. The waits that end by
// themselves (a hold, a Revision turning Ready, a capacity stage) last long
// enough for every case to reach its state before sluice is replaced, and
// end under the replacement.
func upgradeCases() []upgradeCase {
	holding := func(weight int64) func(string, api.Status) bool {
		return func(n string, s api.Status) bool {
			return s.Candidate == n+"-00002" && s.Phase == api.PhaseHolding && s.Weight == weight && !s.Paused
		}
	}
	paused := func(n string, s api.Status) bool { return s.Candidate == n+"-00002" && s.Paused }
	pause := func(t *testing.T, n string) {
		if out, err := sluice(t, "pause", n, "--reason", "before the upgrade"); err != nil {
			t.Fatalf("pause: %v\n%s", err, out)
		}
	}
	slowCompare := compared(map[string]string{"sluice.dev/hold": "75s"})
	return []upgradeCase{
		{state: "waiting for Ready", ann: map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "2s"},
			// Knative's own per-Revision deadline outlasts the wait (the
			// stack's default is 15 s).
			next: map[string]string{stack.AnnotationReadyAfter: "60s", serving.ProgressDeadlineAnnotationKey: "180s"},
			reach: func(n string, s api.Status) bool {
				return s.Candidate == n+"-00002" && s.Phase == api.PhaseWaitingReady
			}, want: api.OutcomeSucceeded},
		{state: "holding", ann: map[string]string{"sluice.dev/steps": "20,100", "sluice.dev/hold": "75s"},
			reach: holding(20), want: api.OutcomeSucceeded},
		{state: "at a manual gate", ann: map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s", "sluice.dev/gates": "100"},
			reach:  func(n string, s api.Status) bool { return s.Candidate == n+"-00002" && s.Phase == api.PhaseGate },
			finish: [][]string{{"promote", "--reason", "after the upgrade"}}, want: api.OutcomeSucceeded},
		// A pause keeps the hold's time left, so a short hold waits as
		// long as the pause does. The hold is long enough for the pause to
		// land in it on a busy machine (at 5 s, a pause sent as the hold
		// was seen came after the rollout had ended, once in CI).
		{state: "paused", ann: map[string]string{"sluice.dev/steps": "30,100", "sluice.dev/hold": "20s"},
			reach: holding(30), put: pause, reached: paused,
			finish: [][]string{{"resume", "--reason", "after the upgrade"}}, want: api.OutcomeSucceeded},
		{state: "drifted", ann: map[string]string{"sluice.dev/steps": "30,60,100", "sluice.dev/hold": "20s"},
			reach: holding(30),
			put: func(t *testing.T, n string) {
				patchTraffic(t, n, []servingv1.TrafficTarget{{RevisionName: n + "-00001", Percent: new(int64(80))}, {RevisionName: n + "-00002", Percent: new(int64(20))}})
			},
			reached: func(n string, s api.Status) bool { return paused(n, s) && s.Drifted },
			finish:  [][]string{{"resume", "--reason", "keep my edit and go on"}}, want: api.OutcomeSucceeded},
		{state: "mid-analysis with a comparison", ann: slowCompare, tmpl: latency("60ms"),
			reach: func(n string, s api.Status) bool {
				return holding(30)(n, s) && s.Analysis != nil && s.Analysis.Rounds > 0
			}, want: api.OutcomeSucceeded},
		{state: "in a capacity stage", ann: map[string]string{"sluice.dev/capacity": "availability", "sluice.dev/capacity-surge": "1", "sluice.dev/hold": "60s"},
			tmpl: map[string]string{"autoscaling.knative.dev/min-scale": "2"},
			reach: func(n string, s api.Status) bool {
				return s.Candidate == n+"-00002" && s.Phase == api.PhaseHolding && s.StepNumber == 1 && s.Capacity != nil
			}, want: api.OutcomeSucceeded},
		{state: "holding, then aborted", ann: map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "10m"},
			reach: holding(50), finish: [][]string{{"abort", "--reason", "aborted after the upgrade"}}, want: api.OutcomeAborted},
	}
}

// TestUpgradeUnderRunningRollouts replaces sluice under running rollouts,
// as an operator's upgrade does: rollouts in every state a rollout waits
// in are started by the previous release (release/releases.txt, built from
// this repository's history), its worker and receiver are replaced by this
// build (the new worker up before the old one stops), and each rollout must
// end as its plan says, with no workflow task failed and this CLI reading
// each one before and after. Then the same from this build back to the
// previous release: a bad upgrade reverted while rollouts run. The way
// back's rollouts are put in their states while the way up's end.
//
// Not parallel: it replaces the stack's worker and receiver, and puts this
// build's back at the end. `make test` runs it, with the other scenarios
// on more clusters (waves_test.go), in a package run of its own (so on a
// stack of its own), beside the short chaos run, and the other scenarios
// without them (test/run.sh).
func TestUpgradeUnderRunningRollouts(t *testing.T) {
	previous := os.Getenv("SLUICE_PREVIOUS_BIN")
	if previous == "" {
		releases, err := version.ReadReleases(stackOptions.Root)
		if err != nil {
			t.Fatal(err)
		}
		if len(releases) > 0 {
			t.Fatalf("release/releases.txt names %s, but SLUICE_PREVIOUS_BIN is not set: run the tests with `make test`, or export SLUICE_PREVIOUS_BIN=$(bash test/tools/install.sh previous)", releases[len(releases)-1].Version)
		}
		t.Skip("no release has been cut yet: release/releases.txt names none")
	}
	current := os.Getenv("SLUICE_BIN")
	ctx := context.Background()
	// Two more clusters, east and west, for a rollout waiting for its
	// wave: on the previous release too.
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	waves := &waveClusters{east: cluster(startCtx, t, "east"), west: cluster(startCtx, t, "west"), c: ctl(t)}
	defer func() {
		// The scenarios after this one run on this build, whatever happened.
		for _, s := range []*stack.Stack{stk, waves.east, waves.west} {
			if s.Sluice() != current {
				if _, err := s.ReplaceSluice(ctx, current); err != nil {
					t.Errorf("put this build back: %v", err)
				}
			}
		}
	}()
	if _, err := stk.ReplaceSluice(ctx, previous); err != nil {
		t.Fatalf("start the previous release: %v", err)
	}
	waves.replace(t, previous)
	up := prepare(t, "up", waves)
	up.replace(t, current)
	// The way back's rollouts start on this build while the way up's
	// finish their waits: one stack, two sets of Services.
	down := prepare(t, "down", waves)
	up.end(t)
	down.replace(t, previous)
	down.end(t)
}

// waveClusters run one rollout in waves beside the upgrade's cases: east is
// wave 1, which waits at a gate after its soak; west is wave 2, waiting for
// its wave when sluice is replaced in all three clusters.
type waveClusters struct {
	east, west *stack.Stack
	c          *control.Client
}

const wavePlan = "waves:\n- {clusters: [east], soak: 1s, gate: true}\n- {clusters: [west]}\n"

func (w *waveClusters) each(fn func(name string, s *stack.Stack, c *control.Client)) {
	fn("east", w.east, clusterCtl(w.c, "east"))
	fn("west", w.west, clusterCtl(w.c, "west"))
}

// start deploys name's first Revision in both clusters, then its second,
// west first, and waits for west waiting for its wave and east at 100%
// awaiting the wave's gate.
func (w *waveClusters) start(t *testing.T, name string) {
	t.Helper()
	policy := map[string]string{"sluice.dev/rollout": "enabled", "sluice.dev/steps": "50,100", "sluice.dev/hold": "2s", "sluice.dev/waves": wavePlan}
	w.each(func(_ string, s *stack.Stack, c *control.Client) {
		deployTo(t, s, name, "example.com/"+name+":v1", policy, nil)
	})
	w.each(func(_ string, _ *stack.Stack, c *control.Client) {
		waitOutcome(t, c, svcTarget(name), name+"-00001", 2*time.Minute)
	})
	time.Sleep(2 * time.Second) // both first rollouts close
	deployTo(t, w.west, name, "example.com/"+name+":v2", nil, nil)
	waitStatus(t, clusterCtl(w.c, "west"), svcTarget(name), 2*time.Minute, "west waiting for its wave", func(s api.Status) bool {
		return s.Candidate == name+"-00002" && s.Phase == api.PhaseWaitingWave
	})
	deployTo(t, w.east, name, "example.com/"+name+":v2", nil, nil)
	waitStatus(t, clusterCtl(w.c, "east"), svcTarget(name), 2*time.Minute, "east at 100%, its wave at the gate", func(s api.Status) bool {
		return s.Candidate == name+"-00002" && s.Phase == api.PhaseWaveHold
	})
}

// replace puts bin in place of sluice in both clusters, as in the first.
func (w *waveClusters) replace(t *testing.T, bin string) {
	t.Helper()
	w.each(func(name string, s *stack.Stack, _ *control.Client) {
		if _, err := s.ReplaceSluice(context.Background(), bin); err != nil {
			t.Fatalf("cluster %s: replace sluice with %s: %v", name, bin, err)
		}
	})
}

// finish reads both rollouts with this CLI, promotes the wave past its
// gate, and sees both succeed: west released only now.
func (w *waveClusters) finish(t *testing.T, name string, replacedAt time.Time, prefix string) {
	t.Helper()
	for _, cluster := range []string{"east", "west"} {
		out, err := sluice(t, "status", name, "--cluster", cluster, "-o", "json")
		var st api.Status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Candidate != name+"-00002" {
			t.Fatalf("this CLI could not read %s's status in %s after the replacement: %v\n%s", name, cluster, err, out)
		}
	}
	if out, err := sluice(t, "wave", "promote", name, "--reason", "upgrade test"); err != nil {
		t.Fatalf("sluice wave promote %s: %v\n%s", name, err, out)
	}
	w.each(func(cluster string, _ *stack.Stack, c *control.Client) {
		st := waitOutcome(t, c, svcTarget(name), name+"-00002", 3*time.Minute)
		if st.Outcome != api.OutcomeSucceeded {
			t.Fatalf("the wave's rollout in %s: %s (%s), want Succeeded", cluster, st.Outcome, st.Reason)
		}
		t.Logf("%s: %-32s %s, %s after the replacement", prefix, "waiting for its wave ("+cluster+")", st.Outcome, st.EndedAt.Sub(replacedAt).Round(100*time.Millisecond))
	})
}

// upgradeRun is one direction of the upgrade: its rollouts, put in their
// states on the sluice running now, then seen to their ends on bin.
type upgradeRun struct {
	prefix, waveName string
	cases            []upgradeCase
	names            []string
	waves            *waveClusters
	// replacedAt is when the new worker took over; wavesAt when the wave
	// clusters' did.
	replacedAt, wavesAt time.Time
}

// prepare runs every upgradeCase, and one rollout in waves, on the sluice
// running now, and returns once each waits in its state.
func prepare(t *testing.T, prefix string, waves *waveClusters) *upgradeRun {
	c := ctl(t)
	r := &upgradeRun{prefix: prefix, waveName: prefix + "-wave", cases: upgradeCases(), waves: waves}
	waves.start(t, r.waveName)
	r.names = make([]string, len(r.cases))
	for i, uc := range r.cases {
		r.names[i] = prefix + "-" + shortName(uc.state)
		all := map[string]string{"sluice.dev/rollout": "enabled"}
		maps.Copy(all, uc.ann)
		deploy(t, r.names[i], "example.com/"+r.names[i]+":v1", all, uc.tmpl)
	}
	for _, name := range r.names {
		waitOutcome(t, c, svcTarget(name), name+"-00001", 2*time.Minute)
		waitClosed(t, c, name)
	}
	for i, uc := range r.cases {
		next := maps.Clone(uc.tmpl)
		if next == nil {
			next = map[string]string{}
		}
		maps.Copy(next, uc.next)
		deploy(t, r.names[i], "example.com/"+r.names[i]+":v2", nil, next)
	}
	for i, uc := range r.cases {
		waitStatus(t, c, svcTarget(r.names[i]), 2*time.Minute, uc.state, func(s api.Status) bool { return uc.reach(r.names[i], s) })
		if uc.put != nil {
			uc.put(t, r.names[i])
		}
	}
	for i, uc := range r.cases {
		if uc.reached != nil {
			waitStatus(t, c, svcTarget(r.names[i]), time.Minute, uc.state, func(s api.Status) bool { return uc.reached(r.names[i], s) })
		}
		readStatus(t, r.names[i], "before")
	}
	return r
}

// replace puts bin in place of sluice under r's rollouts, in this cluster
// and then the wave's two, and sends the commands that end them.
func (r *upgradeRun) replace(t *testing.T, bin string) {
	from := stk.Sluice()
	took, err := stk.ReplaceSluice(context.Background(), bin)
	if err != nil {
		t.Fatalf("replace %s with %s: %v", from, bin, err)
	}
	r.replacedAt = time.Now()
	// Temporal sees the new worker process poll, naming the new build.
	want := fmt.Sprintf("%d@*@sluice-worker/%s", stk.WorkerPID(), binVersion(t, bin))
	testkit.Eventually(t, 30*time.Second, 500*time.Millisecond, "the new worker polling, as "+want, func() (bool, string) {
		var info struct {
			Workers []struct{ Identity string }
		}
		out, err := sluice(t, "version", "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &info) != nil {
			return false, out
		}
		for _, w := range info.Workers {
			if ok, _ := path.Match(want, w.Identity); ok {
				return true, ""
			}
		}
		return false, out
	})
	wavesFrom := time.Now()
	r.waves.replace(t, bin)
	r.wavesAt = time.Now()
	t.Logf("%s: %d rollouts in their states, and one in waves over two more clusters; worker replaced (new up, then old stopped) in %s, then in both clusters in %s",
		r.prefix, len(r.cases), took.Round(time.Millisecond), r.wavesAt.Sub(wavesFrom).Round(time.Millisecond))
	r.waves.finish(t, r.waveName, r.wavesAt, r.prefix)

	for i, uc := range r.cases {
		readStatus(t, r.names[i], "after")
		for _, cmd := range uc.finish {
			args := append([]string{cmd[0], r.names[i]}, cmd[1:]...)
			if out, err := sluice(t, args...); err != nil {
				t.Fatalf("%s: sluice %s: %v\n%s", uc.state, strings.Join(args, " "), err, out)
			}
		}
	}
}

// end sees each of r's rollouts end as its plan says, after the
// replacement: one that ended before it did not wait in its state under
// the replacement, and proves nothing of it.
func (r *upgradeRun) end(t *testing.T) {
	c := ctl(t)
	for i, uc := range r.cases {
		st := waitOutcome(t, c, svcTarget(r.names[i]), r.names[i]+"-00002", 4*time.Minute)
		if st.Outcome != uc.want {
			t.Fatalf("%s: ended %s (%s), want %s", uc.state, st.Outcome, st.Reason, uc.want)
		}
		if !st.EndedAt.After(r.replacedAt) {
			t.Fatalf("%s: ended at %s, before sluice was replaced at %s: its wait must outlast the setup", uc.state, st.EndedAt, r.replacedAt)
		}
		want := r.names[i] + "-00002=100%"
		if uc.want != api.OutcomeSucceeded {
			want = r.names[i] + "-00001=100%"
		}
		if got := serviceTraffic(t, r.names[i]); got != want {
			t.Fatalf("%s: traffic %s, want %s", uc.state, got, want)
		}
		t.Logf("%s: %-32s %s, %s after the replacement", r.prefix, uc.state, st.Outcome, st.EndedAt.Sub(r.replacedAt).Round(100*time.Millisecond))
	}
}

// readStatus reads a rollout's status with this build's CLI, as an
// operator would while the worker is replaced.
func readStatus(t *testing.T, name, when string) {
	t.Helper()
	out, err := sluice(t, "status", name, "-o", "json")
	var st api.Status
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Candidate != name+"-00002" {
		t.Fatalf("this CLI could not read %s's status %s the replacement: %v\n%s", name, when, err, out)
	}
}

// shortName turns a state into a Service name part: its first letters.
func shortName(state string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(state, func(r rune) bool { return r == ' ' || r == ',' || r == '-' }) {
		b.WriteString(strings.ToLower(w[:1]))
	}
	return b.String()
}

// binVersion is the version a sluice binary says it is.
func binVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version", "--client", "-o", "json").Output()
	var info struct{ Version string }
	if err != nil || json.Unmarshal(out, &info) != nil || info.Version == "" {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	return info.Version
}
