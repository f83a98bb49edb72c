package mirror

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// progress is the n-th progress event of rollout run-1 of default/hello.
func progress(n int, typ string, phase api.Phase, weight int64, step int, by, reason string) events.Progress {
	return events.Progress{
		ID: "run-1-" + itoa(n), Type: events.ProgressPrefix + typ, Time: t0.Add(time.Duration(n) * time.Minute),
		Data: events.ProgressData{Namespace: "default", Kind: "Service", Name: "hello", WorkflowID: "rollout/default/service/hello",
			Candidate: "hello-00002", Stable: "hello-00001", Phase: string(phase), Step: step, StepCount: 3, Weight: weight,
			Reason: reason, By: by, Sequence: n},
	}
}

func itoa(n int) string { return string(rune('0'+n/10)) + string(rune('0'+n%10)) }

func condition(s Status, typ string) metav1.ConditionStatus {
	c := meta.FindStatusCondition(s.Conditions, typ)
	if c == nil {
		return "absent"
	}
	return c.Status
}

// TestConditionsFollowTheRollout: Reconciling while it runs (paused too),
// Ready only once the candidate has all the traffic, Stalled after a
// rollback; the last command and the analysis verdict carry over events
// that do not say them.
func TestConditionsFollowTheRollout(t *testing.T) {
	var s Status
	apply := func(p events.Progress) {
		t.Helper()
		next := FromProgress(p, s)
		if !next.newer(s) {
			t.Fatalf("event %s is not newer than the status before it", p.ID)
		}
		next.Conditions = s.Conditions
		next.Finish(1)
		s = next
	}
	apply(progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	if condition(s, ConditionReconciling) != metav1.ConditionTrue || condition(s, ConditionReady) != metav1.ConditionFalse {
		t.Errorf("started: conditions %+v", s.Conditions)
	}
	step := progress(2, "step", api.PhaseHolding, 10, 1, "sluice", "")
	until := t0.Add(5 * time.Minute)
	step.Data.HoldUntil = &until
	apply(step)
	if s.Progress != "1/3" || s.Weight != 10 || s.HoldUntil == nil || s.Phase != "Holding" {
		t.Errorf("step 1: %+v", s)
	}
	round := progress(3, "analysis", api.PhaseHolding, 10, 1, "sluice", "success-rate = 0.98 Failed")
	round.Data.Measurements = []analysis.Measurement{{Name: "latency", Result: analysis.Passed}, {Name: "success-rate", Result: analysis.Failed},
		{Name: "shadow", Result: analysis.Error, DryRun: true}}
	apply(round)
	if s.Analysis == nil || s.Analysis.Verdict != "Failed" {
		t.Errorf("analysis: %+v", s.Analysis)
	}
	apply(progress(4, "paused", api.PhaseHolding, 10, 1, "alice", "looking at the dashboards"))
	if s.Phase != "Paused" || !s.Paused || s.LastCommand == nil || s.LastCommand.By != "alice" || s.LastCommand.Name != "paused" {
		t.Errorf("paused: %+v", s)
	}
	if condition(s, ConditionReconciling) != metav1.ConditionTrue || condition(s, ConditionStalled) != metav1.ConditionFalse {
		t.Errorf("paused: conditions %+v", s.Conditions)
	}
	apply(progress(5, "rolledback", api.PhaseRolledBack, 0, 1, "sluice", "analysis: success-rate failed"))
	if !s.Ended || s.Outcome != "RolledBack" || s.Paused || s.Analysis == nil || s.LastCommand == nil {
		t.Errorf("rolled back: %+v", s)
	}
	if condition(s, ConditionStalled) != metav1.ConditionTrue || condition(s, ConditionReady) != metav1.ConditionFalse ||
		condition(s, ConditionReconciling) != metav1.ConditionFalse {
		t.Errorf("rolled back: conditions %+v", s.Conditions)
	}

	// The next candidate's rollout starts afresh and succeeds.
	next := progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", "")
	next.ID, next.Time, next.Data.Candidate = "run-2-01", t0.Add(time.Hour), "hello-00003"
	apply(next)
	if s.Analysis != nil || s.LastCommand != nil || s.Ended {
		t.Errorf("a new rollout carried the last one's state: %+v", s)
	}
	done := progress(9, "succeeded", api.PhaseSucceeded, 100, 3, "sluice", "hello-00003 has 100% of the traffic")
	done.ID, done.Time = "run-2-09", t0.Add(2*time.Hour)
	apply(done)
	if condition(s, ConditionReady) != metav1.ConditionTrue || condition(s, ConditionStalled) != metav1.ConditionFalse ||
		condition(s, ConditionReconciling) != metav1.ConditionFalse {
		t.Errorf("succeeded: conditions %+v", s.Conditions)
	}
	for _, c := range s.Conditions {
		if c.ObservedGeneration != 1 || c.Reason == "" {
			t.Errorf("condition %+v: want observedGeneration 1 and a reason", c)
		}
	}
}

// TestOlderStateIsNotWritten: a late write of an earlier event of the same
// rollout, or of an earlier rollout, loses to what the resource shows.
func TestOlderStateIsNotWritten(t *testing.T) {
	shown := FromProgress(progress(5, "step", api.PhaseHolding, 50, 2, "sluice", ""), Status{})
	if FromProgress(progress(4, "step", api.PhaseHolding, 10, 1, "sluice", ""), shown).newer(shown) {
		t.Error("an earlier event replaced a later one")
	}
	if !FromProgress(progress(5, "step", api.PhaseHolding, 50, 2, "sluice", ""), shown).newer(shown) {
		t.Error("a retried write of the same event was refused")
	}
	old := progress(9, "succeeded", api.PhaseSucceeded, 100, 3, "sluice", "")
	old.ID, old.Time = "run-0-09", t0
	if FromProgress(old, shown).newer(shown) {
		t.Error("an earlier rollout's event replaced this one's")
	}
}

// TestFromStatusShowsAGate: read from the workflow, a rollout waiting at a
// gate shows as awaiting promotion, with the command that moves it on.
func TestFromStatusShowsAGate(t *testing.T) {
	v := api.Status{
		Target: knative.TargetRef{Namespace: "default", Kind: "Service", Name: "hello"},
		Phase:  api.PhaseGate, Shown: api.PhaseGate, Candidate: "hello-00002", Stable: "hello-00001", Weight: 10,
		StepNumber: 2, StepCount: 3, StartedAt: t0, AsOf: t0.Add(6 * time.Minute),
		Steps:    []api.StepStatus{{Weight: 10}, {Weight: 50, Gate: true}, {Weight: 100}},
		Commands: []api.CommandRecord{{Name: "promote", By: "bob", At: t0.Add(time.Minute), Rejected: "not at a gate"}},
	}
	prev := FromProgress(progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""), Status{})
	s := FromStatus(v, prev)
	s.Finish(1)
	if s.Phase != "AwaitingPromotion" || s.RolloutID != "run-1" || s.Sequence != 2 || s.HoldUntil != nil {
		t.Errorf("gate: %+v", s)
	}
	if s.LastCommand != nil {
		t.Errorf("a rejected command shows as the last one: %+v", s.LastCommand)
	}
	if want := "awaiting promotion before step 2/3 (50%): `sluice promote hello` goes on"; s.Message != want {
		t.Errorf("gate message %q, want %q", s.Message, want)
	}
	if c := meta.FindStatusCondition(s.Conditions, ConditionReconciling); c == nil || c.Message != s.Message || c.Reason != "AwaitingPromotion" {
		t.Errorf("gate: Reconciling %+v", c)
	}
	if !s.newer(prev) {
		t.Error("the workflow's later answer lost to an event it already includes")
	}
}

func newWriter(t *testing.T, objs ...runtime.Object) (*Writer, *kubefake.Clientset) {
	t.Helper()
	services := schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: "RolloutList", services: "ServiceList"}, objs...)
	kube := kubefake.NewClientset()
	w := &Writer{Dynamic: dyn, Kube: kube, UI: "http://ui:8233", Namespace: "default", Log: slog.New(slog.DiscardHandler)}
	w.served.Store(true)
	return w, kube
}

func service(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("serving.knative.dev/v1")
	u.SetKind("Service")
	u.SetNamespace("default")
	u.SetName(name)
	u.SetUID(types.UID("uid-" + name))
	return u
}

func readRollout(t *testing.T, w *Writer, name string) Rollout {
	t.Helper()
	u, err := w.Dynamic.Resource(GVR).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var r Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWriterMirrorsProgress: the first event creates the Rollout, owned by
// its Service, with a link to the workflow; a retried event writes and
// records nothing twice; the events tell the story on the Service.
func TestWriterMirrorsProgress(t *testing.T) {
	ctx := context.Background()
	w, kube := newWriter(t, service("hello"))
	w.Progress(ctx, progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""))
	w.Progress(ctx, progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""))
	w.Progress(ctx, progress(2, "step", api.PhaseHolding, 10, 1, "sluice", "")) // a retried activity
	w.Progress(ctx, progress(3, "rolledback", api.PhaseRolledBack, 0, 1, "sluice", "candidate Revision failed"))
	w.Progress(ctx, progress(2, "step", api.PhaseHolding, 10, 1, "sluice", "")) // late, out of order

	r := readRollout(t, w, "hello")
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != "uid-hello" || r.Spec.Target.Kind != "Service" {
		t.Errorf("owner %+v, spec %+v", r.OwnerReferences, r.Spec)
	}
	if r.Status.Outcome != "RolledBack" || r.Status.URL != "http://ui:8233/namespaces/default/workflows/rollout%2Fdefault%2Fservice%2Fhello" {
		t.Errorf("status %+v", r.Status)
	}
	evs, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Items {
		reasons = append(reasons, e.Type+"/"+e.Reason)
		if e.InvolvedObject.UID != "uid-hello" || e.InvolvedObject.Kind != "Service" {
			t.Errorf("event on %+v", e.InvolvedObject)
		}
	}
	want := map[string]bool{"Normal/RolloutStarted": true, "Normal/RolloutStep": true, "Warning/RolledBack": true}
	if len(reasons) != len(want) {
		t.Errorf("events %v, want one each of %v", reasons, want)
	}
	for _, r := range reasons {
		if !want[r] {
			t.Errorf("event %s not expected", r)
		}
	}
}

// TestWriterLeavesAGoneTargetAlone: no Rollout for a target that is gone.
func TestWriterLeavesAGoneTargetAlone(t *testing.T) {
	ctx := context.Background()
	w, kube := newWriter(t)
	w.Progress(ctx, progress(1, "failed", api.PhaseFailed, 0, 0, "sluice", "the Service was deleted"))
	if _, err := w.Dynamic.Resource(GVR).Namespace("default").Get(ctx, "hello", metav1.GetOptions{}); err == nil {
		t.Error("a Rollout was created for a target that does not exist")
	}
	if evs, _ := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{}); len(evs.Items) != 0 {
		t.Errorf("events on a target that does not exist: %+v", evs.Items)
	}
}

// TestEventKinds: what a service owner sees in kubectl describe.
func TestEventKinds(t *testing.T) {
	for _, c := range []struct {
		typ, by, want string
	}{
		{"paused", api.ByAnalysis, "Warning/PausedByAnalysis"},
		{"paused", api.ByDrift, "Warning/Drift"},
		{"paused", "alice", "Normal/Paused"},
		{"paused", "sluice", "Warning/Paused"},
		{"promoted", "bob", "Normal/Promoted"},
		{"succeeded", "sluice", "Normal/RolloutSucceeded"},
		{"aborted", "carol", "Warning/Aborted"},
		{"failed", "sluice", "Warning/RolloutFailed"},
		{"analysis", "sluice", "/"},
	} {
		typ, reason := eventKind(progress(1, c.typ, api.PhaseHolding, 10, 1, c.by, ""))
		if got := typ + "/" + reason; got != c.want {
			t.Errorf("%s by %s: %s, want %s", c.typ, c.by, got, c.want)
		}
	}
}

// TestMetrics: each progress event counts once however often its activity
// runs; step durations come from consecutive steps of one rollout; the
// gauges describe the Rollouts in the cache.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	w, _ := newWriter(t, service("hello"))
	reg := prometheus.NewRegistry()
	w.Metrics = NewMetrics(reg, w)
	step2 := progress(3, "step", api.PhaseHolding, 50, 2, "sluice", "")
	round := progress(4, "analysis", api.PhaseHolding, 50, 2, "sluice", "")
	round.Data.Measurements = []analysis.Measurement{{Name: "success-rate", Result: analysis.Failed}}
	for _, p := range []events.Progress{
		progress(1, "started", api.PhaseWaitingReady, 0, 0, "sluice", ""),
		progress(2, "step", api.PhaseHolding, 10, 1, "sluice", ""),
		step2, step2, round, round, // retried activities
		progress(5, "rolledback", api.PhaseRolledBack, 0, 2, "sluice", "analysis"),
	} {
		w.Progress(ctx, p)
	}
	if got := testutil.ToFloat64(w.Metrics.started); got != 1 {
		t.Errorf("started %v, want 1", got)
	}
	if got := testutil.ToFloat64(w.Metrics.ended.WithLabelValues("RolledBack")); got != 1 {
		t.Errorf("rolled back %v, want 1", got)
	}
	if got := testutil.ToFloat64(w.Metrics.verdicts.WithLabelValues("success-rate", "Failed")); got != 1 {
		t.Errorf("failed measurements %v, want 1", got)
	}
	if n := testutil.CollectAndCount(w.Metrics.steps); n != 1 {
		t.Fatalf("step histogram has %d series", n)
	}
	if err := testutil.CollectAndCompare(w.Metrics.steps, strings.NewReader(`
# HELP sluice_rollout_step_seconds Time from one step's traffic write to the next step's: the hold, its analysis and the write and verification of the next share.
# TYPE sluice_rollout_step_seconds histogram
sluice_rollout_step_seconds_bucket{le="1"} 0
sluice_rollout_step_seconds_bucket{le="5"} 0
sluice_rollout_step_seconds_bucket{le="15"} 0
sluice_rollout_step_seconds_bucket{le="30"} 0
sluice_rollout_step_seconds_bucket{le="60"} 1
sluice_rollout_step_seconds_bucket{le="120"} 1
sluice_rollout_step_seconds_bucket{le="300"} 1
sluice_rollout_step_seconds_bucket{le="600"} 1
sluice_rollout_step_seconds_bucket{le="1800"} 1
sluice_rollout_step_seconds_bucket{le="3600"} 1
sluice_rollout_step_seconds_bucket{le="14400"} 1
sluice_rollout_step_seconds_bucket{le="+Inf"} 1
sluice_rollout_step_seconds_sum 60
sluice_rollout_step_seconds_count 1
`)); err != nil {
		t.Error(err)
	}

	// The gauges, from a cache holding the Rollout as written.
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	u, err := w.Dynamic.Resource(GVR).Namespace("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Add(u); err != nil {
		t.Fatal(err)
	}
	w.cache.Store(&store)
	if err := testutil.CollectAndCompare(w.Metrics.state, strings.NewReader(`
# HELP sluice_rollout_candidate_weight_percent The share of each target's candidate Revision, in percent, from its Rollout resource.
# TYPE sluice_rollout_candidate_weight_percent gauge
sluice_rollout_candidate_weight_percent{candidate="hello-00002",name="hello",namespace="default",phase="RolledBack"} 0
# HELP sluice_rollout_ended 1 for each target whose last rollout ended, by outcome, from its Rollout resource.
# TYPE sluice_rollout_ended gauge
sluice_rollout_ended{name="hello",namespace="default",outcome="RolledBack"} 1
`), "sluice_rollout_candidate_weight_percent", "sluice_rollout_ended"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(w.Metrics.state, "sluice_rollouts_running"); got != len(phases) {
		t.Errorf("running gauge has %d phases, want %d", got, len(phases))
	}
}
