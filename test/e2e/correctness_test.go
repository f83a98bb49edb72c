package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
)

// annotate sets (or, with "", removes) an annotation of a Service: no new
// Revision, as with `kubectl annotate`.
func annotate(t *testing.T, name, key, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if _, err := stk.Serving.ServingV1().Services(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The networking layer stops reporting ready mid-rollout: the written
// traffic shows in status, RoutesReady never turns True, and the verify
// timeout rolls back once the rollback itself verifies — it never leaves
// the workflow failing its tasks (the harness checks the history).
func TestIngressNotReadyVerifyTimeoutRollsBack(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s14", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1m", "sluice.dev/verify-timeout": "15s"})
	stk.Ingress.Pause(ns, "s14", true)
	defer stk.Ingress.Pause(ns, "s14", false)
	deploy(t, "s14", "example.com/s14:v2", nil, nil)
	st := waitStatus(t, c, svcTarget("s14"), 90*time.Second, "the verify timeout", func(s api.Status) bool {
		return s.Candidate == "s14-00002" && s.Phase == api.PhaseRollingBack
	})
	if st.Outcome != "" || !strings.Contains(st.Reason, "within the verify timeout of 15s") || !strings.Contains(st.Reason, "IngressNotConfigured") {
		t.Fatalf("while rolling back: outcome %q reason %q", st.Outcome, st.Reason)
	}
	// The ingress recovers: the rollback verifies.
	stk.Ingress.Pause(ns, "s14", false)
	st = waitOutcome(t, c, svcTarget("s14"), "s14-00002", 60*time.Second)
	if st.Outcome != api.OutcomeRolledBack {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s14"); got != "s14-00001=100%" {
		t.Fatalf("traffic after the rollback: %s", got)
	}
}

// A cluster administrator lowers a limit the Service's template breaks
// (Knative's config-defaults max-revision-timeout-seconds, below the
// template's timeoutSeconds): Knative's webhook refuses every write of the
// Service.
// The rollout pauses with the API server's message instead of rolling back
// into the same refusal; once the limit is lifted, resume finishes it.
func TestWriteRefusedOutsideTrafficPauses(t *testing.T) {
	c := ctl(t)
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s15", Namespace: ns, Annotations: map[string]string{
		"sluice.dev/rollout": "enabled", "sluice.dev/steps": "20,60,100", "sluice.dev/hold": "5s"}}}
	svc.Spec.Template.Spec.Containers = containers("example.com/s15:v1")
	svc.Spec.Template.Spec.TimeoutSeconds = new(int64(500))
	if _, err := stk.Serving.ServingV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitOutcome(t, c, svcTarget("s15"), "s15-00001", 60*time.Second)
	waitClosed(t, c, "s15")
	deploy(t, "s15", "example.com/s15:v2", nil, nil)
	waitStatus(t, c, svcTarget("s15"), 60*time.Second, "the first hold", func(s api.Status) bool {
		return s.Candidate == "s15-00002" && s.Phase == api.PhaseHolding && s.Weight == 20
	})
	lift := limitTimeouts(t)
	st := waitStatus(t, c, svcTarget("s15"), 30*time.Second, "the pause", func(s api.Status) bool { return s.Paused })
	if st.Phase != api.PhaseStepping || !strings.Contains(st.PauseReason, "expected 0 <= 500 <= 400: spec.template.spec.timeoutSeconds") ||
		!strings.Contains(st.PauseReason, "outside the traffic list") {
		t.Fatalf("paused in %s: %s", st.Phase, st.PauseReason)
	}
	if got := serviceTraffic(t, "s15"); got != "s15-00001=80%, s15-00002=20%" {
		t.Fatalf("traffic while refused: %s", got)
	}
	lift()
	if out, err := sluice(t, "resume", "s15", "--reason", "limit lifted"); err != nil {
		t.Fatalf("resume: %v %s", err, out)
	}
	st = waitOutcome(t, c, svcTarget("s15"), "s15-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s15") != "s15-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "s15"))
	}
}

// limitTimeouts lowers Knative's max-revision-timeout-seconds to 400, and
// returns what lifts it again.
func limitTimeouts(t *testing.T) (lift func()) {
	t.Helper()
	ctx := context.Background()
	set := func(v any) {
		patch, _ := json.Marshal(map[string]any{"data": map[string]any{"max-revision-timeout-seconds": v}})
		if _, err := stk.Kube().CoreV1().ConfigMaps("knative-serving").Patch(ctx, "config-defaults", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // Knative's webhook watches its ConfigMaps
	}
	set("400")
	lifted := false
	lift = func() {
		if !lifted {
			lifted = true
			set(nil)
		}
	}
	t.Cleanup(lift)
	return lift
}

// Knative routes a latestRevision target to the new Revision before
// sluice pins it (here: the Service is opted in only after that, and the
// rollout started by hand): sluice does not take the traffic back.
func TestKnativeRoutedTheCandidateFirst(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	deploy(t, "s16", "example.com/s16:v1", nil, nil)
	waitRevisionReady(t, "s16-00001")
	deploy(t, "s16", "example.com/s16:v2", nil, nil)
	waitRevisionReady(t, "s16-00002")
	deadline := time.Now().Add(30 * time.Second)
	for {
		svc, _ := stk.Serving.ServingV1().Services(ns).Get(context.Background(), "s16", metav1.GetOptions{})
		if len(svc.Status.Traffic) == 1 && svc.Status.Traffic[0].RevisionName == "s16-00002" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Knative's status never routed s16-00002")
		}
		time.Sleep(200 * time.Millisecond)
	}
	annotate(t, "s16", "sluice.dev/rollout", "enabled")
	if out, err := sluice(t, "start", "s16", "s16-00002"); err != nil {
		t.Fatalf("start: %v %s", err, out)
	}
	st := waitOutcome(t, c, svcTarget("s16"), "s16-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || !strings.Contains(st.Reason, "Knative had already sent s16-00002 100% of the traffic") {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s16"); got != "s16-00002=100%" {
		t.Fatalf("traffic %s", got)
	}
}

// Tags: a tag on the stable Revision stays on it; a 0% latestRevision
// target keeps following the latest Revision through the whole rollout.
func TestTagsFollowTheirTargets(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	// A hold long enough for a poll of a loaded machine to see it.
	firstRollout(t, c, "s17", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "10s"})
	patchTraffic(t, "s17", []servingv1.TrafficTarget{
		{RevisionName: "s17-00001", Percent: new(int64(100)), Tag: "prod"},
		{LatestRevision: new(true), Percent: new(int64(0)), Tag: "latest"},
	})
	deploy(t, "s17", "example.com/s17:v2", nil, nil)
	waitStatus(t, c, svcTarget("s17"), 60*time.Second, "the 50% hold", func(s api.Status) bool {
		return s.Candidate == "s17-00002" && s.Phase == api.PhaseHolding
	})
	if got := serviceTraffic(t, "s17"); got != "s17-00001=50% (tag prod), latest=0% (tag latest), s17-00002=50%" {
		t.Fatalf("traffic in the hold: %s", got)
	}
	st := waitOutcome(t, c, svcTarget("s17"), "s17-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s17"); got != "s17-00001=0% (tag prod), latest=0% (tag latest), s17-00002=100%" {
		t.Fatalf("traffic at the end: %s", got)
	}
	// Knative resolves the latest tag to the new Revision.
	svc, _ := stk.Serving.ServingV1().Services(ns).Get(context.Background(), "s17", metav1.GetOptions{})
	if len(svc.Status.Traffic) != 3 || svc.Status.Traffic[1].Tag != "latest" || svc.Status.Traffic[1].RevisionName != "s17-00002" {
		t.Fatalf("status traffic %+v", svc.Status.Traffic)
	}
}

// Abort of a rollout whose traffic followed the latest Revision: the
// stable is pinned by name (latestRevision would send everything to the
// aborted candidate), and the outcome says so and how to undo it.
func TestAbortSaysLatestRevisionIsPinned(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "s18", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "10m"})
	patchTraffic(t, "s18", []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}})
	// The receiver, and with it the admission webhook (TestAdmissionPinsLatestTrafficInTheWrite), is down
	// during the deploy: the template change goes through unpinned, and the
	// rollout is started by hand. The Revision is Ready only after sluice
	// has pinned the latestRevision target itself.
	stk.StopReceiver()
	deploy(t, "s18", "example.com/s18:v2", nil, map[string]string{stack.AnnotationReadyAfter: "8s"})
	if err := stk.StartReceiver(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := serviceTraffic(t, "s18"); got != "latest=100%" {
		t.Fatalf("traffic after the deploy: %s", got)
	}
	if out, err := sluice(t, "start", "s18", "s18-00002"); err != nil {
		t.Fatalf("start: %v %s", err, out)
	}
	waitStatus(t, c, svcTarget("s18"), 60*time.Second, "the 50% hold", func(s api.Status) bool {
		return s.Candidate == "s18-00002" && s.Phase == api.PhaseHolding
	})
	if out, err := sluice(t, "abort", "s18", "--reason", "bad"); err != nil {
		t.Fatalf("abort: %v %s", err, out)
	}
	st := waitOutcome(t, c, svcTarget("s18"), "s18-00002", 30*time.Second)
	if st.Outcome != api.OutcomeAborted || !strings.Contains(st.Reason, "now names s18-00001: the latest Revision, s18-00002, serves none of it") ||
		!strings.Contains(st.Reason, "kn service update s18 -n "+ns+" --traffic @latest=100") {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	if got := serviceTraffic(t, "s18"); got != "s18-00001=100%" {
		t.Fatalf("traffic %s", got)
	}
}

// A hand edit during a long hold (45 s, well above the 30 s a hold needs
// for a watch) pauses the rollout at once (not at the next step), status
// shows what Knative serves beside what sluice wrote, and resume goes on from
// the operator's list: their split and their new tag are kept, the next step
// is the first above the candidate's share.
func TestHandEditDuringHoldThenResumeKeepsIt(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "s19", map[string]string{"sluice.dev/steps": "30,60,100", "sluice.dev/hold": "45s"})
	deploy(t, "s19", "example.com/s19:v2", nil, nil)
	waitStatus(t, c, svcTarget("s19"), 60*time.Second, "the first hold", func(s api.Status) bool {
		return s.Candidate == "s19-00002" && s.Phase == api.PhaseHolding && s.Weight == 30
	})
	edited := []servingv1.TrafficTarget{
		{RevisionName: "s19-00001", Percent: new(int64(55))}, {RevisionName: "s19-00002", Percent: new(int64(45))},
		{RevisionName: "s19-00001", Percent: new(int64(0)), Tag: "debug"},
	}
	patchTraffic(t, "s19", edited)
	edit := time.Now()
	st := waitStatus(t, c, svcTarget("s19"), 15*time.Second, "the pause", func(s api.Status) bool { return s.Paused })
	if waited := time.Since(edit); waited > 10*time.Second || st.Phase != api.PhaseHolding || !strings.Contains(st.PauseReason, "during the hold") {
		t.Fatalf("paused after %s in %s: %s", waited, st.Phase, st.PauseReason)
	}
	// Knative's status shows the edit once its controllers have caught up
	// (the pause follows the spec, at once).
	for deadline := time.Now().Add(15 * time.Second); ; {
		out, err := sluice(t, "status", "s19", "--kubeconfig", stk.Kubeconfig)
		if err == nil && strings.Contains(out, "s19-00001=70%, s19-00002=30% (written by sluice)") &&
			strings.Contains(out, "Serving:") && strings.Contains(out, "s19-00001=55%, s19-00002=45%, s19-00001=0% (tag debug)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice status: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := sluice(t, "resume", "s19", "--reason", "keep my split"); err != nil {
		t.Fatalf("resume: %v %s", err, out)
	}
	st = waitStatus(t, c, svcTarget("s19"), 30*time.Second, "the 60% hold", func(s api.Status) bool {
		return s.Phase == api.PhaseHolding && s.Weight == 60
	})
	if got := serviceTraffic(t, "s19"); got != "s19-00001=40%, s19-00001=0% (tag debug), s19-00002=60%" {
		t.Fatalf("traffic at 60%%: %s", got)
	}
	if out, err := sluice(t, "promote", "s19", "--full"); err != nil {
		t.Fatalf("promote --full: %v %s", err, out)
	}
	st = waitOutcome(t, c, svcTarget("s19"), "s19-00002", 30*time.Second)
	if st.Outcome != api.OutcomeSucceeded || serviceTraffic(t, "s19") != "s19-00001=0% (tag debug), s19-00002=100%" {
		t.Fatalf("outcome %s (%s), traffic %s", st.Outcome, st.Reason, serviceTraffic(t, "s19"))
	}
}

// The race of TestKnativeRoutedTheCandidateFirst closed: a template change of an opted-in Service
// whose traffic follows the latest Revision is pinned in the same write by
// sluice's admission webhook, so Knative never routes the new Revision —
// here even while its rollout cannot run (no worker) — and the rollout,
// once a worker is back, moves it step by step.
func TestAdmissionPinsLatestTrafficInTheWrite(t *testing.T) {
	c := ctl(t)
	firstRollout(t, c, "s20", map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s"})
	patchTraffic(t, "s20", []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}, {LatestRevision: new(true), Percent: new(int64(0)), Tag: "latest"}})
	excluded := webhookExclusions(t)
	stk.KillWorker()
	restarted := false
	defer func() {
		if !restarted {
			_ = stk.StartWorker(context.Background())
		}
	}()
	deploy(t, "s20", "example.com/s20:v2", nil, nil)
	if got := serviceTraffic(t, "s20"); got != "s20-00001=100%, latest=0% (tag latest)" {
		t.Fatalf("traffic right after the template change: %s", got)
	}
	waitRevisionReady(t, "s20-00002")
	time.Sleep(2 * time.Second) // Knative would have routed it by now
	svc, _ := stk.Serving.ServingV1().Services(ns).Get(context.Background(), "s20", metav1.GetOptions{})
	if st := svc.Status.Traffic; len(st) != 2 || st[0].RevisionName != "s20-00001" || *st[0].Percent != 100 || st[1].RevisionName != "s20-00002" {
		t.Fatalf("what Knative serves with no worker running: %s", knative.FormatTraffic(svc.Status.Traffic))
	}
	if err := stk.StartWorker(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted = true
	st := waitOutcome(t, c, svcTarget("s20"), "s20-00002", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || strings.Contains(st.Reason, "already") {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	waitProgress(t, "s20-00002", "started,step,step,succeeded")
	if got := serviceTraffic(t, "s20"); got != "latest=0% (tag latest), s20-00002=100%" {
		t.Fatalf("traffic at the end: %s", got)
	}
	// The rollout's traffic steps changed neither the template nor the
	// annotations: the API server did not call the pin or the policy
	// webhook for them (their matchConditions), and no condition failed to
	// evaluate (which, with failurePolicy Ignore, would skip the webhook
	// for writes it must see: the pin above shows it saw the deploy).
	// (The policy webhook sees the first step: Knative's own webhook, which
	// runs before it, notes the worker as the Service's lastModifier in an
	// annotation.)
	after := webhookExclusions(t)
	for wh, least := range map[string]float64{"pin-latest.sluice.dev": 2, "policy.sluice.dev": 1} {
		if n := after[wh] - excluded[wh]; n < least {
			t.Errorf("writes %s was not called for during the rollout: %v, want at least %v (all: %v)", wh, n, least, after)
		}
	}
	if errs := after["errors"]; errs != 0 {
		t.Errorf("sluice's webhooks' matchConditions failed to evaluate %v times", errs)
	}

	// A Service that is not opted in keeps following the latest Revision
	// (Knative's webhook defaults its empty traffic to exactly that).
	deploy(t, "s20-free", "example.com/s20:v1", nil, nil)
	waitRevisionReady(t, "s20-free-00001")
	deploy(t, "s20-free", "example.com/s20:v2", nil, nil)
	if got := serviceTraffic(t, "s20-free"); got != "latest=100%" {
		t.Fatalf("a Service not opted in was changed: %s", got)
	}
}

// webhookExclusions reads the API server's metrics: per webhook of sluice's,
// the writes its matchConditions kept from calling it, and under "errors"
// how often they failed to evaluate.
func webhookExclusions(t *testing.T) map[string]float64 {
	t.Helper()
	kube, err := kubernetes.NewForConfig(stk.Rest)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse the API server's metrics: %v", err)
	}
	out := map[string]float64{}
	for fam, key := range map[string]string{"apiserver_admission_match_condition_exclusions_total": "",
		"apiserver_admission_match_condition_evaluation_errors_total": "errors"} {
		for _, m := range fams[fam].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && strings.HasSuffix(l.GetValue(), ".sluice.dev") {
					k := key
					if k == "" {
						k = l.GetValue()
					}
					out[k] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// The first rollout of a Service created with a tagged latestRevision
// target: the tag and its URL stay, following the latest Revision.
func TestFirstRolloutKeepsTaggedLatestTarget(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	deploy(t, "s21", "example.com/s21:v1", map[string]string{"sluice.dev/rollout": "enabled"}, nil,
		servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(int64(100))},
		servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(int64(0)), Tag: "latest"})
	st := waitOutcome(t, c, svcTarget("s21"), "s21-00001", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded {
		t.Fatalf("outcome %s: %s", st.Outcome, st.Reason)
	}
	// In either order: Knative gives the list's order no meaning, and a
	// run on a loaded machine found the tagged target second (the
	// latestRevision target pinned where it stood) instead of first.
	got := strings.Split(serviceTraffic(t, "s21"), ", ")
	slices.Sort(got)
	if want := []string{"latest=0% (tag latest)", "s21-00001=100%"}; !slices.Equal(got, want) {
		t.Fatalf("traffic after the first rollout: %q, want %q in any order", got, want)
	}
}
