package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
)

var fast = map[string]string{"sluice.dev/steps": "25,50,100", "sluice.dev/hold": "1s"}

// Service mode: a new Revision rolls out through every step to 100%.
func TestServiceModeRollout(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s1", fast)
	deploy(t, "s1", "example.com/s1:v2", nil, nil)
	st := waitOutcome(t, c, svcTarget("s1"), "s1-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || st.Stable != "s1-00001" {
		t.Fatalf("outcome %s (%s), stable %s", st.Outcome, st.Reason, st.Stable)
	}
	for i, step := range st.Steps {
		if step.StartedAt.IsZero() || (i < len(st.Steps)-1 && step.EndedAt.Sub(step.StartedAt) < time.Second) {
			t.Errorf("step %d: %+v", i+1, step)
		}
	}
	if got := serviceTraffic(t, "s1"); got != "s1-00002=100%" {
		t.Fatalf("traffic %s", got)
	}
	waitProgress(t, "s1-00002", "started,step,step,step,succeeded")
}

// Manual gates, passed three ways: `sluice promote` (an update, which
// answers with the rollout's verdict), the Temporal CLI's own
// `temporal workflow signal` with the documented JSON input, and
// `sluice promote --no-wait` (a signal). The candidate turns Ready a few
// seconds in, so its Ready CloudEvent reaches the rollout while it waits,
// and the rollout says the event told it.
func TestManualGateWithCLI(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s3", map[string]string{"sluice.dev/steps": "10,30,60,100", "sluice.dev/hold": "1s", "sluice.dev/gates": "30,60,100"})
	deploy(t, "s3", "example.com/s3:v2", nil, map[string]string{stack.AnnotationReadyAfter: "3s"})
	atGate := func(weight int64) api.Status {
		return waitStatus(t, c, svcTarget("s3"), 60*time.Second, fmt.Sprintf("the gate after %d%%", weight), func(s api.Status) bool {
			return s.Candidate == "s3-00002" && s.Phase == api.PhaseGate && s.Weight == weight
		})
	}
	st := atGate(10)
	if got := serviceTraffic(t, "s3"); got != "s3-00001=90%, s3-00002=10%" {
		t.Fatalf("traffic at the gate: %s", got)
	}
	if st.ReadinessFrom != api.ReadinessFromEvent || st.Told == nil || st.Told.State != knative.RevisionReady {
		t.Fatalf("readiness from %q, told %+v: the Ready CloudEvent did not tell the rollout", st.ReadinessFrom, st.Told)
	}
	if out, err := sluice(t, "status", "s3"); err != nil || !strings.Contains(out, "told by its Revision's CloudEvent") {
		t.Fatalf("sluice status: %v\n%s", err, out)
	}
	if out, err := sluice(t, "promote", "s3", "--reason", "looks good"); err != nil || !strings.Contains(out, "promoted") {
		t.Fatalf("sluice promote: %v\n%s", err, out)
	}

	atGate(30)
	signal := exec.Command(os.Getenv("SLUICE_TEMPORAL_BIN"), "workflow", "signal", "--address", stk.TemporalAddr,
		"--workflow-id", "rollout/default/service/s3", "--name", "promote", "--input", `{"by":"release-bot","reason":"canary healthy"}`)
	if out, err := signal.CombinedOutput(); err != nil {
		t.Fatalf("temporal workflow signal: %v\n%s", err, out)
	}

	atGate(60)
	if out, err := sluice(t, "promote", "s3", "--no-wait", "--reason", "from a script"); err != nil || !strings.Contains(out, "sent promote to the rollout of default/service/s3 as a signal") {
		t.Fatalf("sluice promote --no-wait: %v\n%s", err, out)
	}
	st = waitOutcome(t, c, svcTarget("s3"), "s3-00002", 30*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s3") != "s3-00002=100%" {
		t.Fatalf("outcome %s, traffic %s", st.Outcome, serviceTraffic(t, "s3"))
	}
	var via []string
	for _, cmd := range st.Commands {
		if cmd.Name != api.CommandPromote {
			continue
		}
		via = append(via, fmt.Sprintf("%s by %s via %s (%s)", cmd.Name, cmd.By, cmd.Via, cmd.Reason))
	}
	want := "promote by e2e@test via update (looks good); promote by release-bot via signal (canary healthy); promote by e2e@test via signal (from a script)"
	if got := strings.Join(via, "; "); got != want {
		t.Fatalf("commands recorded:\n%s\nwant\n%s", got, want)
	}
	waitProgress(t, "s3-00002", "started,step,promoted,step,promoted,step,promoted,step,succeeded")
}

// `sluice abort`: the exact pre-rollout traffic is back, tagged extra target included.
func TestAbortRestoresTaggedTraffic(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s4", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "10m"})
	before := []servingv1.TrafficTarget{
		{RevisionName: "s4-00001", Percent: new(int64(100))},
		{RevisionName: "s4-00001", Percent: new(int64(0)), Tag: "stable"},
	}
	patchTraffic(t, "s4", before)
	deploy(t, "s4", "example.com/s4:v2", nil, nil)
	waitStatus(t, c, svcTarget("s4"), 60*time.Second, "the 50% hold", func(s api.Status) bool {
		return s.Candidate == "s4-00002" && s.Phase == api.PhaseHolding
	})
	if got := serviceTraffic(t, "s4"); got != "s4-00001=50%, s4-00001=0% (tag stable), s4-00002=50%" {
		t.Fatalf("traffic in the hold: %s", got)
	}
	if out, err := sluice(t, "abort", "s4", "--reason", "errors in the logs"); err != nil {
		t.Fatalf("sluice abort: %v\n%s", err, out)
	}
	st := waitOutcome(t, c, svcTarget("s4"), "s4-00002", 30*time.Second)
	if st.Outcome != api.OutcomeAborted || !strings.Contains(st.Reason, "errors in the logs") {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s4"); got != knative.FormatTraffic(before) {
		t.Fatalf("traffic after abort: %s, want %s", got, knative.FormatTraffic(before))
	}
	waitProgress(t, "s4-00002", "started,step,aborted")
}

// A failing Revision rolls back; one that never becomes Ready hits the progress deadline.
func TestFailingAndNeverReadyRevisionsRollBack(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s5", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s", "sluice.dev/progress-deadline": "8s"})
	deploy(t, "s5", "example.com/s5:v2", nil, map[string]string{stack.AnnotationFail: "true"})
	st := waitOutcome(t, c, svcTarget("s5"), "s5-00002", 60*time.Second)
	// The reason is Knative's own, from the pod's container status.
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "ExitCode1") {
		t.Fatalf("failing Revision: outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s5"); got != "s5-00001=100%" {
		t.Fatalf("traffic after the failed Revision: %s", got)
	}
	deploy(t, "s5", "example.com/s5:v3", nil, map[string]string{stack.AnnotationNeverReady: "true"})
	st = waitOutcome(t, c, svcTarget("s5"), "s5-00003", 60*time.Second)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "progress deadline of 8s") {
		t.Fatalf("never-Ready Revision: outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s5"); got != "s5-00001=100%" {
		t.Fatalf("traffic after the progress deadline: %s", got)
	}
	waitProgress(t, "s5-00003", "started,rolledback")
	// With sluice's own deadline longer than Knative's, Knative fails the
	// Revision first (its Deployment's progress deadline), and says so.
	annotate(t, "s5", "sluice.dev/progress-deadline", "90s")
	deploy(t, "s5", "example.com/s5:v4", nil, map[string]string{stack.AnnotationNeverReady: "true"})
	st = waitOutcome(t, c, svcTarget("s5"), "s5-00004", 60*time.Second)
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "ProgressDeadlineExceeded") {
		t.Fatalf("a Revision Knative gave up on: outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s5"); got != "s5-00001=100%" {
		t.Fatalf("traffic after Knative's progress deadline: %s", got)
	}
	// The Service says how its last candidate's rollout ended, and no
	// Revision carries the mark: Knative copies a Revision's labels and
	// annotations into its pods, and a new one would restart them. A later
	// update event of the rolled-back candidate (Knative relabels a Revision
	// whose traffic changes) starts nothing: the receiver answers it with no
	// Temporal call.
	svc, err := stk.Serving.ServingV1().Services(ns).Get(context.Background(), "s5", metav1.GetOptions{})
	if err != nil || svc.Annotations[config.AnnotationEnded] != config.Ended("s5-00004", string(api.OutcomeRolledBack)) {
		t.Fatalf("Service s5 annotations %v (%v), want %s=%s", svc.GetAnnotations(), err, config.AnnotationEnded, config.Ended("s5-00004", "RolledBack"))
	}
	for _, rev := range []string{"s5-00002", "s5-00003", "s5-00004"} {
		r, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), rev, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range r.Labels {
			if strings.HasPrefix(k, config.Prefix) {
				t.Fatalf("%s carries the label %s", rev, k)
			}
		}
		if v, ok := r.Annotations[config.AnnotationEnded]; ok {
			t.Fatalf("%s carries the annotation %s=%s", rev, config.AnnotationEnded, v)
		}
	}
	// The worst case: the rolled-back candidate turns Ready after all (its
	// event is one the receiver has not seen for it).
	runs := rolloutRuns(t, c, svcTarget("s5"))
	code, msg := sendRevisionUpdate(t, "s5-00004", func(r *servingv1.Revision) {
		r.Status.MarkResourcesAvailableTrue()
		r.Status.MarkContainerHealthyTrue()
		r.Status.MarkActiveTrue()
	})
	if code != http.StatusOK || !strings.Contains(msg, "ended RolledBack") {
		t.Fatalf("an update event of the rolled-back s5-00004: %d %s", code, msg)
	}
	if after := rolloutRuns(t, c, svcTarget("s5")); after != runs {
		t.Fatalf("runs of the s5 rollout: %d before the update event, %d after", runs, after)
	}
}

// The worker is killed mid-step and restarted: the rollout completes, no
// step repeated or skipped.
func TestWorkerKilledMidStep(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "s7", map[string]string{"sluice.dev/steps": "20,40,60,100", "sluice.dev/hold": "3s"})
	deploy(t, "s7", "example.com/s7:v2", nil, nil)
	waitStatus(t, c, svcTarget("s7"), 60*time.Second, "the second step", func(s api.Status) bool {
		return s.Candidate == "s7-00002" && s.Phase == api.PhaseHolding && s.Weight == 40
	})
	crashWorker(t, 4*time.Second) // the hold ends while no worker runs
	st := waitOutcome(t, c, svcTarget("s7"), "s7-00002", 90*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s7") != "s7-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "s7"))
	}
	for i := 1; i < len(st.Steps); i++ {
		if st.Steps[i].StartedAt.Before(st.Steps[i-1].EndedAt) || st.Steps[i].StartedAt.IsZero() {
			t.Fatalf("steps out of order: %+v", st.Steps)
		}
	}
	waitProgress(t, "s7-00002", "started,step,step,step,step,succeeded")
}

// The receiver is down while events are emitted: the rollout still
// completes, on the workflow's own re-reads.
func TestReceiverDownRolloutCompletes(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "s8", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s"})
	deploy(t, "s8", "example.com/s8:v2", nil, map[string]string{stack.AnnotationReadyAfter: "4s"})
	waitStatus(t, c, svcTarget("s8"), 60*time.Second, "the rollout to wait for readiness", func(s api.Status) bool {
		return s.Candidate == "s8-00002" && s.Phase == api.PhaseWaitingReady
	})
	stk.StopReceiver()
	defer func() {
		if err := stk.StartReceiver(context.Background()); err != nil {
			t.Fatal(err)
		}
	}()
	st := waitOutcome(t, c, svcTarget("s8"), "s8-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s8") != "s8-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "s8"))
	}
	// No event could tell it: its own watch of the Revision did.
	if st.ReadinessFrom != api.ReadinessFromWatch || st.Told != nil {
		t.Fatalf("readiness from %q, told %+v; want the rollout's own watch", st.ReadinessFrom, st.Told)
	}
}

// 8b. The receiver is down while a new Revision's events are sent, and none
// of them ever arrives (the adapter is gone by the time the receiver is
// back): the receiver's sweep finds the Revision no event brought, and its
// rollout runs all the same.
func TestRevisionWhoseEventsWereLostIsSwept(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "s8b", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s"})
	stk.StopReceiver()
	deploy(t, "s8b", "example.com/s8b:v2", nil, nil)
	waitRevisionReady(t, "s8b-00002")
	// Every event of the Revision so far went to a receiver that was down.
	// Knative may still write its status again (and the adapter retries
	// each event for a while), so the adapter goes too: no event of it can
	// reach the receiver when it is back, and only the sweep can tell.
	if err := stk.Kill(stack.Adapter); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stk.Restart(context.Background(), stack.Adapter); err != nil {
			t.Errorf("restart the adapter: %v", err)
		}
	})
	if err := stk.StartReceiver(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := serviceTraffic(t, "s8b"); got != "s8b-00001=100%" {
		t.Fatalf("traffic before the sweep: %s", got)
	}
	st := waitOutcome(t, c, svcTarget("s8b"), "s8b-00002", 90*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s8b") != "s8b-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "s8b"))
	}
	if st.Told == nil || st.Told.By != "sluice-receiver's sweep" {
		t.Fatalf("told %+v: want the receiver's sweep", st.Told)
	}
}

// Someone edits the traffic by hand mid-rollout: the rollout pauses and
// says why; nothing is overwritten.
func TestHandEditPausesRollout(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s9", map[string]string{"sluice.dev/steps": "30,60,100", "sluice.dev/hold": "3s"})
	deploy(t, "s9", "example.com/s9:v2", nil, nil)
	waitStatus(t, c, svcTarget("s9"), 60*time.Second, "the first hold", func(s api.Status) bool {
		return s.Candidate == "s9-00002" && s.Phase == api.PhaseHolding && s.Weight == 30
	})
	edited := []servingv1.TrafficTarget{{RevisionName: "s9-00001", Percent: new(int64(80))}, {RevisionName: "s9-00002", Percent: new(int64(20))}}
	patchTraffic(t, "s9", edited)
	st := waitStatus(t, c, svcTarget("s9"), 30*time.Second, "the pause", func(s api.Status) bool { return s.Paused })
	if !strings.Contains(st.PauseReason, "changed outside sluice") || !strings.Contains(st.PauseReason, "s9-00002=20%") {
		t.Fatalf("pause reason: %s", st.PauseReason)
	}
	time.Sleep(2 * time.Second)
	if got := serviceTraffic(t, "s9"); got != knative.FormatTraffic(edited) {
		t.Fatalf("the hand edit was overwritten: %s", got)
	}
	if out, err := sluice(t, "abort", "s9", "--reason", "cleanup"); err != nil {
		t.Fatalf("abort: %v %s", err, out)
	}
	waitOutcome(t, c, svcTarget("s9"), "s9-00002", 30*time.Second)
	waitProgress(t, "s9-00002", "started,step,paused,aborted")
}

// A third Revision arrives mid-rollout: it supersedes the candidate.
func TestThirdRevisionSupersedes(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	// The second Revision holds 2 minutes, so the third comes while it is
	// still at its first step however slowly it becomes Ready (a 5-s hold let
	// it reach its second step on a busy machine); the third's rollout reads
	// the 1-s hold set just before it is deployed.
	firstRollout(t, c, "s6", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "2m"})
	deploy(t, "s6", "example.com/s6:v2", nil, nil)
	waitStatus(t, c, svcTarget("s6"), 60*time.Second, "the first hold", func(s api.Status) bool {
		return s.Candidate == "s6-00002" && s.Phase == api.PhaseHolding
	})
	annotate(t, "s6", "sluice.dev/hold", "1s")
	deploy(t, "s6", "example.com/s6:v3", nil, nil)
	st := waitOutcome(t, c, svcTarget("s6"), "s6-00003", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || len(st.Superseded) != 1 || st.Superseded[0] != "s6-00002" || st.Stable != "s6-00001" {
		t.Fatalf("outcome %s (%s), superseded %v, stable %s", st.Outcome, st.Reason, st.Superseded, st.Stable)
	}
	if got := serviceTraffic(t, "s6"); got != "s6-00003=100%" {
		t.Fatalf("traffic %s", got)
	}
	waitProgress(t, "s6-00002", "started,step,superseded")
}

// Route mode: a Configuration with a standalone Route rolls out the same way.
func TestRouteModeRollout(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	ctx := context.Background()
	// The Route first, so the Configuration's first Revision is already
	// routed when its event arrives, and starts no rollout.
	route := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Name: "api-route", Namespace: ns},
		Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{{RevisionName: "api-00001", Percent: new(int64(100)), Tag: "prod"},
			// Stays latestRevision: true throughout, its URL following the new Revision.
			{ConfigurationName: "api", LatestRevision: new(true), Percent: new(int64(0)), Tag: "latest"}}}}
	if _, err := stk.Serving.ServingV1().Routes(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns, Annotations: map[string]string{
		"sluice.dev/rollout": "enabled", "sluice.dev/route": "api-route", "sluice.dev/steps": "50,100", "sluice.dev/hold": "1s"}}}
	cfg.Spec.Template.Spec.Containers = containers("example.com/api:v1")
	if _, err := stk.Serving.ServingV1().Configurations(ns).Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRevisionReady(t, "api-00001")
	for attempt := 0; ; attempt++ {
		cur, _ := stk.Serving.ServingV1().Configurations(ns).Get(ctx, "api", metav1.GetOptions{})
		cur.Spec.Template.Spec.Containers = containers("example.com/api:v2")
		if _, err := stk.Serving.ServingV1().Configurations(ns).Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
			break
		} else if attempt > 5 {
			t.Fatal(err)
		}
	}
	target := knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}
	st := waitOutcome(t, c, target, "api-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	rt, _ := stk.Serving.ServingV1().Routes(ns).Get(ctx, "api-route", metav1.GetOptions{})
	if got := knative.FormatTraffic(rt.Spec.Traffic); got != "api-00001=0% (tag prod), latest(api)=0% (tag latest), api-00002=100%" {
		t.Fatalf("route traffic %s", got)
	}
	waitProgress(t, "api-00002", "started,step,step,succeeded")
}
