package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/test/testkit"
)

const ns = "default"

var helloTarget = knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "hello"}

// harness runs the Rollout workflow in Temporal's test environment (its
// clock skips ahead over timers) with the real activities over a fake
// Knative cluster.
type harness struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	k     *knativefake.Cluster
	attrs map[string]any // search attributes as last upserted
}

// testWatch keeps verifying activities short: the workflow tests skip time,
// a watch on the fake cluster waits in real time.
const testWatch = 20 * time.Millisecond

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	return newHarnessIn(t, "", objs...)
}

// newHarnessIn is newHarness with a worker of cluster.
func newHarnessIn(t *testing.T, cluster string, objs ...runtime.Object) *harness {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testkit.TemporalLogger())
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	// These tests share two cores with the end-to-end stack in CI, where a
	// workflow task has been starved past the 1s default; a workflow that truly
	// blocks still trips this.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 10 * time.Second})
	k := knativefake.New(objs...)
	env.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: api.RolloutWorkflow})
	env.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: k}, Defaults: config.BuiltinDefaults(), WatchLimit: testWatch, Cluster: cluster})
	h := &harness{t: t, env: env, k: k, attrs: map[string]any{}}
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		for k, v := range args.Get(0).(temporal.SearchAttributes).GetUntypedValues() {
			h.attrs[k.GetName()] = v
		}
	}).Return(nil).Maybe()
	return h
}

// helloService is a Service on hello-00001 with a tagged extra target and a
// 0% preview tag; the candidate hello-00002 is Ready unless said otherwise.
func helloObjects(ann map[string]string, candidateReady bool) []runtime.Object {
	base := map[string]string{config.AnnotationSteps: "25,50,100", config.AnnotationHold: "1m"}
	for k, v := range ann {
		base[k] = v
	}
	return []runtime.Object{
		knativefake.Service(ns, "hello", base,
			knativefake.Target("hello-00001", 90, ""),
			knativefake.Target("hello-00000", 10, "legacy"),
			knativefake.Target("hello-00001", 0, "current")),
		knativefake.Revision(ns, "hello", 0, true),
		knativefake.Revision(ns, "hello", 1, true),
		knativefake.Revision(ns, "hello", 2, candidateReady),
	}
}

func (h *harness) run(candidate string) {
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: helloTarget, Candidate: candidate, RequestedBy: "test"}})
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
}

func (h *harness) result() api.Result {
	h.t.Helper()
	var res api.Result
	if err := h.env.GetWorkflowResult(&res); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
	return res
}

func (h *harness) status() api.Status {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(api.QueryStatus)
	if err != nil {
		h.t.Fatalf("status query: %v", err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		h.t.Fatalf("decode status: %v", err)
	}
	return st
}

// updateResult is filled in when the workflow has handled an update.
type updateResult struct {
	accepted bool
	rejected error
}

func (u *updateResult) rejectedWith(want string) bool {
	return u != nil && u.rejected != nil && strings.Contains(u.rejected.Error(), want)
}

// update sends a command as an update; the result is known once the
// workflow has handled it.
func (h *harness) update(name string, cmd api.Command) *updateResult {
	u := &updateResult{}
	h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnReject:   func(err error) { u.rejected = err },
		OnAccept:   func() { u.accepted = true },
		OnComplete: func(any, error) {},
	}, cmd)
	return u
}

// at schedules f at d after the workflow starts.
func (h *harness) at(d time.Duration, f func()) { h.env.RegisterDelayedCallback(f, d) }

// continued is the input the run continued as new with, which must be a
// newer candidate's.
func (h *harness) continued() RunInput {
	h.t.Helper()
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		h.t.Fatalf("workflow error = %v, want continue-as-new with the newer candidate", err)
	}
	var next RunInput
	if err := decodeInput(can, &next); err != nil {
		h.t.Fatal(err)
	}
	return next
}

// nextRun is a harness for the next run of h's workflow, on h's cluster.
func (h *harness) nextRun() *harness {
	h2 := newHarness(h.t)
	h2.k = h.k
	h2.env.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: h.k}, Defaults: config.BuiltinDefaults(), WatchLimit: testWatch})
	return h2
}

func (h *harness) traffic(name string) []servingv1.TrafficTarget {
	h.t.Helper()
	svc, err := h.k.ServingV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get service: %v", err)
	}
	return svc.Spec.Traffic
}

// endedMark is the outcome the Service's sluice.dev/ended annotation gives
// a Revision, "" if none; the Revision itself must carry no sluice label
// (Knative would copy it into its pods).
func (h *harness) endedMark(service, revision string) string {
	h.t.Helper()
	svc, err := h.k.ServingV1().Services(ns).Get(context.Background(), service, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get service: %v", err)
	}
	rev, err := h.k.ServingV1().Revisions(ns).Get(context.Background(), revision, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get revision: %v", err)
	}
	for k := range rev.Labels {
		if strings.HasPrefix(k, config.Prefix) {
			h.t.Errorf("Revision %s carries the label %s", revision, k)
		}
	}
	return config.EndedOutcome(svc.Annotations[config.AnnotationEnded], revision)
}

func wantTraffic(t *testing.T, got []servingv1.TrafficTarget, want ...servingv1.TrafficTarget) {
	t.Helper()
	if !knative.SameTraffic(got, want) {
		t.Fatalf("traffic = %s\nwant      %s", knative.FormatTraffic(got), knative.FormatTraffic(want))
	}
}

var tgt = knativefake.Target

func TestHappyPathWalksEveryStep(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	var seen []string
	for _, d := range []time.Duration{30 * time.Second, 90 * time.Second} {
		h.at(d, func() { seen = append(seen, knative.FormatTraffic(h.traffic("hello"))) })
	}
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeSucceeded || res.Stable != "hello-00001" {
		t.Fatalf("result = %+v", res)
	}
	seen = append(seen, knative.FormatTraffic(h.traffic("hello")))
	want := []string{
		"hello-00001=67%, hello-00000=10% (tag legacy), hello-00001=0% (tag current), hello-00002=23%",
		"hello-00001=45%, hello-00000=10% (tag legacy), hello-00001=0% (tag current), hello-00002=45%",
		"hello-00000=10% (tag legacy), hello-00001=0% (tag current), hello-00002=90%",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("traffic over time:\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	st := h.status()
	if st.Phase != api.PhaseSucceeded || st.StepCount != 3 || st.Weight != 100 {
		t.Fatalf("status = phase %s steps %d weight %d", st.Phase, st.StepCount, st.Weight)
	}
	for i, s := range st.Steps {
		if s.StartedAt.IsZero() || s.EndedAt.Before(s.StartedAt) {
			t.Errorf("step %d times: %v .. %v", i, s.StartedAt, s.EndedAt)
		}
	}
	if d := st.Steps[1].StartedAt.Sub(st.Steps[0].StartedAt); d < time.Minute || d > time.Minute+5*time.Second {
		t.Errorf("step 1 held %s, want 1m", d)
	}
	if n := h.k.WriteCount("hello"); n != 3 {
		t.Errorf("traffic writes = %d, want 3 (one per step)", n)
	}
}

func TestReadinessToldByEvent(t *testing.T) {
	h := newHarness(t, helloObjects(nil, false)...)
	h.at(3*time.Second, func() {
		// The event arrives between two reads of the Revision by the
		// workflow (they are ReadinessPoll apart): only the signal can
		// start the first step this early.
		_ = h.k.SetRevisionReady(ns, "hello-00002", "True", "", "")
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00002", State: knative.RevisionReady, By: "receiver"})
	})
	h.at(4*time.Second, func() {
		// The same state again, and one for another Revision: both ignored.
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00002", State: knative.RevisionReady, By: "receiver"})
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00003", State: knative.RevisionFailed, By: "receiver"})
	})
	h.run("hello-00002")
	st := h.status()
	if h.result().Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if st.ReadinessFrom != api.ReadinessFromEvent {
		t.Errorf("readiness told by %q, want %q", st.ReadinessFrom, api.ReadinessFromEvent)
	}
	if got := h.endedMark("hello", "hello-00002"); got != "" {
		t.Errorf("a candidate that succeeded is marked %s: %q", config.AnnotationEnded, got)
	}
	if wait := st.Steps[0].StartedAt.Sub(st.StartedAt); wait < 3*time.Second || wait >= 4*time.Second {
		t.Fatalf("first step started %s after start, want at the signal (3s)", wait)
	}
}

// An event says the candidate is Ready, but Knative says otherwise when its
// traffic is written: the rollout waits for it again instead of rolling back.
func TestToldReadyButNotReadyAtTheWriteWaitsAgain(t *testing.T) {
	h := newHarness(t, helloObjects(nil, false)...)
	h.at(3*time.Second, func() {
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00002", State: knative.RevisionReady, By: "receiver"})
	})
	h.at(20*time.Second, func() { _ = h.k.SetRevisionReady(ns, "hello-00002", "True", "", "") })
	h.run("hello-00002")
	st := h.status()
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
	}
	if st.ReadinessFrom != api.ReadinessFromWatch {
		t.Errorf("readiness from %q, want the watch that saw it Ready after the refused write", st.ReadinessFrom)
	}
	if wait := st.Steps[0].StartedAt.Sub(st.StartedAt); wait < 20*time.Second {
		t.Fatalf("first step started %s after start, before the candidate was Ready (20s)", wait)
	}
}

func TestDeletionToldByEventFails(t *testing.T) {
	h := newHarness(t, helloObjects(nil, false)...)
	h.at(3*time.Second, func() {
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00002", State: knative.RevisionDeleted, By: "receiver"})
	})
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, "hello-00002 was deleted") {
		t.Fatalf("result = %+v, want failed naming the deleted Revision", res)
	}
}

func TestFailureToldByEventRollsBack(t *testing.T) {
	h := newHarness(t, helloObjects(nil, false)...)
	h.at(3*time.Second, func() {
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00002", State: knative.RevisionFailed,
			Reason: "ExitCode1", Message: "Container failed with: boom", By: "receiver"})
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "boom") {
		t.Fatalf("result = %+v, want rolled back naming the Revision's message", res)
	}
	if st := h.status(); st.ReadinessFrom != api.ReadinessFromEvent {
		t.Errorf("readiness told by %q, want %q", st.ReadinessFrom, api.ReadinessFromEvent)
	}
	wantTraffic(t, h.traffic("hello"),
		knativefake.Target("hello-00001", 90, ""),
		knativefake.Target("hello-00000", 10, "legacy"),
		knativefake.Target("hello-00001", 0, "current"))
}

func TestReadinessByReRead(t *testing.T) {
	h := newHarness(t, helloObjects(nil, false)...)
	h.at(25*time.Second, func() { _ = h.k.SetRevisionReady(ns, "hello-00002", "True", "", "") })
	h.run("hello-00002")
	st := h.status()
	if h.result().Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if wait := st.Steps[0].StartedAt.Sub(st.StartedAt); wait < 25*time.Second || wait > 25*time.Second+ReadinessPoll {
		t.Fatalf("first step started %s after start, want within one poll of 25s", wait)
	}
	if st.ReadinessFrom != api.ReadinessFromWatch {
		t.Errorf("readiness told by %q, want %q", st.ReadinessFrom, api.ReadinessFromWatch)
	}
}

func TestProgressDeadlineRollsBack(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationProgressDeadline: "2m"}, false)...)
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "progress deadline of 2m0s") {
		t.Fatalf("result = %+v", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"))
}

func TestFailedRevisionRollsBack(t *testing.T) {
	h := newHarness(t, helloObjects(nil, false)...)
	h.at(20*time.Second, func() {
		_ = h.k.SetRevisionReady(ns, "hello-00002", "False", "ContainerHealthy", "container exited with code 1")
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "container exited with code 1") {
		t.Fatalf("result = %+v", res)
	}
}

func TestVerifyTimeoutRollsBack(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationVerifyTimeout: "30s"}, true)...)
	h.k.Stall = "hello-00002"
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeRolledBack || !strings.Contains(res.Reason, "verify timeout of 30s") {
		t.Fatalf("result = %+v", res)
	}
	if got := h.endedMark("hello", "hello-00002"); got != string(api.OutcomeRolledBack) {
		t.Errorf("candidate marked %s: %q, want RolledBack", config.AnnotationEnded, got)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"))
}

func TestAbortRestoresExactTraffic(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	var noReason, abort *updateResult
	h.at(70*time.Second, func() {
		noReason = h.update(api.CommandAbort, api.Command{By: "alice"})
		abort = h.update(api.CommandAbort, api.Command{By: "alice", Reason: "p99 latency doubled"})
	})
	h.run("hello-00002")
	if !noReason.rejectedWith("give a reason") || !abort.accepted {
		t.Fatalf("abort without reason: %+v; with a reason: %+v", noReason, abort)
	}
	res := h.result()
	if res.Outcome != api.OutcomeAborted || res.Reason != "aborted by alice: p99 latency doubled" {
		t.Fatalf("result = %+v", res)
	}
	if got := h.endedMark("hello", "hello-00002"); got != string(api.OutcomeAborted) {
		t.Errorf("candidate marked %s: %q, want Aborted", config.AnnotationEnded, got)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"))
	st := h.status()
	last := st.Commands[len(st.Commands)-1]
	if last.Name != api.CommandAbort || last.By != "alice" || last.Reason != "p99 latency doubled" || last.Via != "update" || last.At.IsZero() {
		t.Fatalf("command history: %+v", st.Commands)
	}
}

func TestRollbackPinsLatestRevision(t *testing.T) {
	objs := []runtime.Object{
		knativefake.Service(ns, "hello", map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1m"},
			tgt("@latest", 100, "")),
		knativefake.Revision(ns, "hello", 1, true),
		// Not Ready yet when the rollout starts, as a new Revision is.
		knativefake.Revision(ns, "hello", 2, false),
	}
	h := newHarness(t, objs...)
	h.at(5*time.Second, func() { _ = h.k.SetRevisionReady(ns, "hello-00002", "True", "", "") })
	h.at(30*time.Second, func() { h.update(api.CommandAbort, api.Command{By: "bob", Reason: "errors"}) })
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeAborted ||
		!strings.Contains(res.Reason, "now names hello-00001: the latest Revision, hello-00002, serves none of it") ||
		!strings.Contains(res.Reason, "kn service update hello -n default --traffic @latest=100") {
		t.Fatalf("result = %+v, want Aborted with a note on the pinned latestRevision target", res)
	}
	if b := h.status().Baseline; len(b) != 1 || b[0].RevisionName != "hello-00001" {
		t.Fatalf("baseline = %s, want latestRevision pinned to hello-00001", knative.FormatTraffic(b))
	}
	// latestRevision would now resolve to the Ready candidate: the rollback
	// pins it to the stable Revision instead.
	wantTraffic(t, h.traffic("hello"), servingv1.TrafficTarget{RevisionName: "hello-00001", Percent: new(int64(100))})
}

func TestGateWaitsForPromote(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationGates: "50"}, true)...)
	var atGate api.Status
	var phaseAttr any
	var resume, promote *updateResult
	h.at(10*time.Minute, func() {
		atGate = h.status()
		phaseAttr = h.attrs[api.AttrPhase.GetName()]
		resume = h.update(api.CommandResume, api.Command{By: "carol"})
		promote = h.update(api.CommandPromote, api.Command{By: "carol", Reason: "dashboards look good"})
	})
	h.run("hello-00002")
	if atGate.Phase != api.PhaseGate || atGate.Weight != 25 {
		t.Fatalf("at 10m: phase %s weight %d, want waiting at the gate with 25%%", atGate.Phase, atGate.Weight)
	}
	if got := phaseAttr; got != string(api.PhaseGate) {
		t.Fatalf("search attribute %s at the gate = %q, want %q", api.AttrPhase.GetName(), got, api.PhaseGate)
	}
	if !resume.rejectedWith("not paused") {
		t.Errorf("resume when not paused: %+v", resume)
	}
	if !promote.accepted {
		t.Errorf("promote: %+v", promote)
	}
	st := h.status()
	if h.result().Outcome != api.OutcomeSucceeded || !st.Steps[1].GatePassed {
		t.Fatalf("outcome %s, gate passed %v", st.Outcome, st.Steps[1].GatePassed)
	}
	if started := st.Steps[1].StartedAt.Sub(st.StartedAt); started < 10*time.Minute {
		t.Fatalf("50%% step started %s after start, before the promote at 10m", started)
	}
}

func TestPromoteRejectedBeforeReadyAndAfterEnd(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationProgressDeadline: "1m"}, false)...)
	var early *updateResult
	h.at(5*time.Second, func() { early = h.update(api.CommandPromote, api.Command{By: "dan"}) })
	h.run("hello-00002")
	if !early.rejectedWith("not Ready yet") {
		t.Fatalf("promote while waiting for readiness: %+v", early)
	}
	end := h.status()
	r := &rollout{st: state{Phase: end.Phase, Candidate: end.Candidate, Outcome: end.Outcome, Reason: end.Reason}}
	if err := r.validate(api.CommandPromote, api.Command{By: "dan"}); err == nil || !strings.Contains(err.Error(), "has finished") {
		t.Fatalf("promote after the end: %v", err)
	}
}

func TestPauseFreezesHoldAndResumeContinues(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	var paused api.Status
	var pause, promote, resume *updateResult
	h.at(40*time.Second, func() { pause = h.update(api.CommandPause, api.Command{By: "erin", Reason: "checking logs"}) })
	h.at(5*time.Minute, func() {
		paused = h.status()
		promote = h.update(api.CommandPromote, api.Command{By: "erin"})
		resume = h.update(api.CommandResume, api.Command{By: "erin"})
	})
	h.run("hello-00002")
	if !pause.accepted || !promote.rejectedWith("paused") || !resume.accepted {
		t.Fatalf("pause %+v, promote while paused %+v, resume %+v", pause, promote, resume)
	}
	if paused.Shown != api.PhasePaused || paused.Weight != 25 || time.Duration(paused.HoldLeftAt) < 15*time.Second || time.Duration(paused.HoldLeftAt) > 25*time.Second {
		t.Fatalf("while paused: shown %s weight %d hold left %s (want ~20s kept)", paused.Shown, paused.Weight, paused.HoldLeftAt)
	}
	st := h.status()
	if h.result().Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s", st.Outcome)
	}
	if d := st.Steps[1].StartedAt.Sub(st.StartedAt); d < 5*time.Minute+15*time.Second || d > 5*time.Minute+25*time.Second {
		t.Fatalf("second step started %s after start, want the kept ~20s after resume at 5m", d)
	}
}

func TestPromoteFullSkipsToHundred(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationGates: "50,100"}, true)...)
	h.at(30*time.Second, func() {
		h.update(api.CommandPromoteFull, api.Command{By: "frank", Reason: "hotfix"})
	})
	h.run("hello-00002")
	st := h.status()
	if h.result().Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if d := st.EndedAt.Sub(st.StartedAt); d > time.Minute {
		t.Fatalf("promote-full took %s", d)
	}
	if !st.Steps[1].StartedAt.IsZero() {
		t.Fatalf("the 50%% step ran despite promote-full")
	}
}

// handEdit replaces the Service's traffic as an operator would.
func (h *harness) handEdit(traffic ...servingv1.TrafficTarget) {
	svc, _ := h.k.ServingV1().Services(ns).Get(context.Background(), "hello", metav1.GetOptions{})
	svc.Spec.Traffic = traffic
	if _, err := h.k.ServingV1().Services(ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		h.t.Errorf("outside edit: %v", err)
	}
}

// The operator's edit during the 25% hold: 60/30 with a new 0% debug tag.
var operatorEdit = []servingv1.TrafficTarget{
	tgt("hello-00001", 60, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"),
	tgt("hello-00002", 30, ""), tgt("hello-00001", 0, "debug"),
}

func TestDriftDuringHoldPausesThenResumeGoesOnFromLiveTraffic(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationHold: "10m"}, true)...)
	var paused, resumed api.Status
	var mid []servingv1.TrafficTarget
	h.at(2*time.Minute, func() { h.handEdit(operatorEdit...) })
	h.at(4*time.Minute, func() {
		paused = h.status()
		h.update(api.CommandResume, api.Command{By: "gina", Reason: "keep my split"})
	})
	h.at(5*time.Minute, func() { resumed, mid = h.status(), h.traffic("hello") })
	h.run("hello-00002")
	// Noticed during the hold, not at the next write ten minutes later.
	if paused.Shown != api.PhasePaused || !strings.Contains(paused.PauseReason, "changed outside sluice during the hold") || !strings.Contains(paused.PauseReason, "debug") {
		t.Fatalf("after drift: shown %s reason %q", paused.Shown, paused.PauseReason)
	}
	// 30 of the 90 the two Revisions hold is 33%: the next step is 50%, the
	// operator's targets and tags kept.
	if resumed.Weight != 50 || resumed.StepNumber != 2 || !resumed.Steps[0].Skipped {
		t.Fatalf("after resume: weight %d step %d steps %+v", resumed.Weight, resumed.StepNumber, resumed.Steps)
	}
	wantTraffic(t, mid, tgt("hello-00001", 45, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"),
		tgt("hello-00001", 0, "debug"), tgt("hello-00002", 45, ""))
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"),
		tgt("hello-00001", 0, "debug"), tgt("hello-00002", 90, ""))
}

func TestRollbackAfterResumedDriftRestoresTheOperatorsList(t *testing.T) {
	h := newHarness(t, helloObjects(map[string]string{config.AnnotationHold: "10m"}, true)...)
	h.at(2*time.Minute, func() { h.handEdit(operatorEdit...) })
	h.at(4*time.Minute, func() { h.update(api.CommandResume, api.Command{By: "gina"}) })
	h.at(6*time.Minute, func() { h.update(api.CommandAbort, api.Command{By: "gina", Reason: "errors"}) })
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeAborted {
		t.Fatalf("result %+v", res)
	}
	// The operator's list, the candidate's share back on the stable Revision.
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"),
		tgt("hello-00001", 0, "debug"))
}

func TestDriftAtAWriteStillPauses(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	var paused api.Status
	// Between the watch's looks (the test's watches end at once and look
	// again every driftRetry) and the next step's write.
	h.at(59*time.Second, func() { h.handEdit(operatorEdit...) })
	h.at(3*time.Minute, func() {
		paused = h.status()
		h.update(api.CommandResume, api.Command{By: "gina"})
	})
	h.run("hello-00002")
	if paused.Shown != api.PhasePaused || !strings.Contains(paused.PauseReason, "changed outside sluice") {
		t.Fatalf("after drift: shown %s reason %q", paused.Shown, paused.PauseReason)
	}
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
}

func TestSupersedeReturnsTrafficAndContinuesWithNewer(t *testing.T) {
	objs := append(helloObjects(nil, true), knativefake.Revision(ns, "hello", 3, true))
	h := newHarness(t, objs...)
	h.at(90*time.Second, func() {
		// An old Revision's late event must not supersede: with its
		// generation it is ignored at once, without one after a read.
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00001", Generation: 1, State: knative.RevisionReady})
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00001"})
	})
	h.at(100*time.Second, func() {
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00003", By: "ci"})
	})
	h.run("hello-00002")
	next := h.continued()
	if next.Candidate != "hello-00003" || next.Carry == nil || next.Carry.Superseded[0] != "hello-00002" || next.Carry.Stable != "hello-00001" {
		t.Fatalf("continued with %+v", next)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"))

	// The next run rolls hello-00003 out from the same stable Revision and
	// still restores the original traffic on abort.
	h2 := h.nextRun()
	h2.env.ExecuteWorkflow(Rollout, next)
	var res api.Result
	if err := h2.env.GetWorkflowResult(&res); err != nil || res.Outcome != api.OutcomeSucceeded || res.Candidate != "hello-00003" {
		t.Fatalf("second run: %+v, %v", res, err)
	}
}

func TestContinueAsNewCarriesState(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	h.at(70*time.Second, func() {
		h.update(api.CommandPause, api.Command{By: "hal", Reason: "long pause"})
	})
	h.at(80*time.Second, func() { h.env.SetContinueAsNewSuggested(true) })
	h.run("hello-00002")
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	var next RunInput
	if err := decodeInput(can, &next); err != nil {
		t.Fatal(err)
	}
	c := next.Carry
	if c == nil || c.Step != 1 || c.Weight != 50 || !c.paused() || c.Runs != 1 || len(c.Commands) != 2 {
		t.Fatalf("carried state: %+v", c)
	}

	h2 := newHarness(t)
	h2.env.RegisterActivity(&activities.Activities{Knative: knative.Client{Serving: h.k}, Defaults: config.BuiltinDefaults(), WatchLimit: testWatch})
	h2.env.RegisterDelayedCallback(func() { h2.update(api.CommandResume, api.Command{By: "hal"}) }, time.Minute)
	h2.env.ExecuteWorkflow(Rollout, next)
	var res api.Result
	if err := h2.env.GetWorkflowResult(&res); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("resumed run: %+v, %v", res, err)
	}
	if n := h.k.WriteCount("hello"); n != 3 {
		t.Fatalf("traffic writes across both runs = %d, want 3: no step repeated", n)
	}
}

func TestTargetDeletedMidRollout(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	h.at(30*time.Second, func() {
		_ = h.k.ServingV1().Services(ns).Delete(context.Background(), "hello", metav1.DeleteOptions{})
	})
	h.run("hello-00002")
	res := h.result()
	if res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, "Service default/hello was deleted during the rollout") {
		t.Fatalf("result = %+v", res)
	}
}

func TestNotOptedInFails(t *testing.T) {
	objs := helloObjects(nil, true)
	objs[0].(*servingv1.Service).Annotations[config.AnnotationRollout] = "disabled"
	h := newHarness(t, objs...)
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, "sluice.dev/rollout: enabled") {
		t.Fatalf("result = %+v", res)
	}
	if n := h.k.WriteCount("hello"); n != 0 {
		t.Fatalf("wrote traffic %d times to a target that did not opt in", n)
	}
}

func TestSignalledCommandsAreValidatedAndRecorded(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	h.at(30*time.Second, func() {
		h.env.SignalWorkflow(api.CommandResume, api.Command{By: "ivy"})
		h.env.SignalWorkflow(api.CommandPromote, api.Command{By: "ivy", Reason: "skip the hold"})
	})
	h.run("hello-00002")
	st := h.status()
	var resume, promote *api.CommandRecord
	for i := range st.Commands {
		switch st.Commands[i].Name {
		case api.CommandResume:
			resume = &st.Commands[i]
		case api.CommandPromote:
			promote = &st.Commands[i]
		}
	}
	if resume == nil || !strings.Contains(resume.Rejected, "not paused") || resume.Via != "signal" {
		t.Fatalf("resume signal record: %+v", resume)
	}
	if promote == nil || promote.Rejected != "" {
		t.Fatalf("promote signal record: %+v", promote)
	}
	if d := st.Steps[1].StartedAt.Sub(st.StartedAt); d > 45*time.Second {
		t.Fatalf("promote by signal did not end the hold: step 2 started after %s", d)
	}
}

func decodeInput(can *workflow.ContinueAsNewError, into *RunInput) error {
	return converter.GetDefaultDataConverter().FromPayloads(can.Input, into)
}

func TestRouteModeRollsOutOnTheRoute(t *testing.T) {
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", Annotations: map[string]string{
		config.AnnotationRollout: "enabled", config.AnnotationRoute: "api-route",
		config.AnnotationSteps: "50,100", config.AnnotationHold: "30s",
	}}}
	route := &servingv1.Route{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-route", Generation: 1},
		Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{
			{ConfigurationName: "api", LatestRevision: new(true), Percent: new(int64(100))},
			tgt("api-00001", 0, "pinned"),
		}},
	}
	h := newHarness(t, cfg, route, knativefake.Revision(ns, "api", 1, true), knativefake.Revision(ns, "api", 2, false))
	h.at(time.Second, func() { _ = h.k.SetRevisionReady(ns, "api-00002", "True", "", "") })
	var mid string
	h.at(15*time.Second, func() {
		r, _ := h.k.ServingV1().Routes(ns).Get(context.Background(), "api-route", metav1.GetOptions{})
		mid = knative.FormatTraffic(r.Spec.Traffic)
	})
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}, Candidate: "api-00002"}})
	if res := h.result(); res.Outcome != api.OutcomeSucceeded || res.Stable != "api-00001" {
		t.Fatalf("result %+v", res)
	}
	if mid != "api-00001=50%, api-00001=0% (tag pinned), api-00002=50%" {
		t.Fatalf("route traffic at 50%%: %s", mid)
	}
	r, _ := h.k.ServingV1().Routes(ns).Get(context.Background(), "api-route", metav1.GetOptions{})
	if got := knative.FormatTraffic(r.Spec.Traffic); got != "api-00001=0% (tag pinned), api-00002=100%" {
		t.Fatalf("final route traffic: %s", got)
	}
	if h.k.WriteCount("api-route") != 3 {
		t.Fatalf("route writes = %d, want 3 (pin, 50%%, 100%%)", h.k.WriteCount("api-route"))
	}
}

// A target's first rollout superseded by a newer Revision: the first
// Revision serves the traffic by then, so the newer one is rolled out from
// it step by step — not given all the traffic as if it were the first.
func TestSupersededFirstRolloutLeavesAStableToStepFrom(t *testing.T) {
	latest := servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(int64(100))}
	objs := []runtime.Object{
		knativefake.Service(ns, "hello", map[string]string{config.AnnotationSteps: "25,50,100", config.AnnotationHold: "1m"}, latest),
		knativefake.Revision(ns, "hello", 1, true),
		knativefake.Revision(ns, "hello", 2, false),
	}
	h := newHarness(t, objs...)
	// Knative is slow to show the first rollout's writes: the newer
	// Revision arrives while the first is under way.
	h.k.SetFrozen(true)
	h.at(5*time.Second, func() {
		_ = h.k.SetRevisionReady(ns, "hello-00002", "True", "", "")
		h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: "hello-00002", Generation: 2, State: knative.RevisionReady, By: "ci"})
		h.k.SetFrozen(false)
	})
	h.run("hello-00001")
	next := h.continued()
	if next.Candidate != "hello-00002" || next.Carry == nil || next.Carry.Superseded[0] != "hello-00001" {
		t.Fatalf("continued with %+v", next)
	}

	h2 := h.nextRun()
	h2.env.ExecuteWorkflow(Rollout, next)
	st := h2.status()
	var res api.Result
	if err := h2.env.GetWorkflowResult(&res); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("second run: %+v, %v", res, err)
	}
	if st.Stable != "hello-00001" || len(st.Steps) != 3 || !strings.Contains(res.Reason, "that hello-00001 had") {
		t.Fatalf("hello-00002 went from stable %q in %d steps (%s); want hello-00001's traffic, step by step", st.Stable, len(st.Steps), res.Reason)
	}
}
