package workflows

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// taggedTarget is a rollout target whose traffic has a tag on the stable
// Revision and a 0% latestRevision target with a tag, in either mode.
type taggedTarget struct {
	target  knative.TargetRef
	object  string // the traffic object's name
	rev     func(n int) string
	objects []runtime.Object
}

func tagged(mode string) taggedTarget {
	latest := servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(int64(0)), Tag: "latest"}
	ann := map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1m", config.AnnotationVerifyTimeout: "30s"}
	if mode == knative.KindService {
		return taggedTarget{
			target: helloTarget, object: "hello", rev: func(n int) string { return knativefake.Revision(ns, "hello", n, false).Name },
			objects: []runtime.Object{
				knativefake.Service(ns, "hello", ann, tgt("hello-00001", 100, "prod"), latest),
				knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, false), knativefake.Revision(ns, "hello", 3, true),
			},
		}
	}
	ann[config.AnnotationRollout], ann[config.AnnotationRoute] = "enabled", "api-route"
	latest.ConfigurationName = "api"
	return taggedTarget{
		target: knative.TargetRef{Namespace: ns, Kind: knative.KindConfiguration, Name: "api"}, object: "api-route",
		rev: func(n int) string { return knativefake.Revision(ns, "api", n, false).Name },
		objects: []runtime.Object{
			&servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api", Annotations: ann}},
			&servingv1.Route{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-route", Generation: 1},
				Spec: servingv1.RouteSpec{Traffic: []servingv1.TrafficTarget{tgt("api-00001", 100, "prod"), latest}}},
			knativefake.Revision(ns, "api", 1, true), knativefake.Revision(ns, "api", 2, false), knativefake.Revision(ns, "api", 3, true),
		},
	}
}

func (h *harness) objectTraffic(kind, name string) []servingv1.TrafficTarget {
	h.t.Helper()
	if kind == knative.KindService {
		return h.traffic(name)
	}
	r, err := h.k.ServingV1().Routes(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return r.Spec.Traffic
}

// Tags survive every ending: a tag on the stable Revision stays on it (at
// 0% once the candidate has everything), and a 0% latestRevision target
// stays latestRevision: true throughout, so its URL follows the latest
// Ready Revision instead of being frozen on the old one.
func TestTagsThroughEveryEnding(t *testing.T) {
	for _, mode := range []string{knative.KindService, knative.KindConfiguration} {
		for _, ending := range []string{"success", "rollback", "abort", "supersede"} {
			t.Run(mode+"/"+ending, func(t *testing.T) {
				tt := tagged(mode)
				h := newHarness(t, tt.objects...)
				stable, cand := tt.rev(1), tt.rev(2)
				original := knative.CloneTraffic(h.objectTraffic(tt.target.Kind, tt.object))
				latest := original[1]
				var mid []servingv1.TrafficTarget
				h.at(5*time.Second, func() { _ = h.k.SetRevisionReady(ns, cand, "True", "", "") })
				h.at(30*time.Second, func() {
					mid = h.objectTraffic(tt.target.Kind, tt.object)
					switch ending {
					case "rollback":
						h.k.Stall = cand // the 100% write never shows in status: verify timeout
					case "abort":
						h.update(api.CommandAbort, api.Command{By: "test", Reason: "tags"})
					case "supersede":
						h.env.SignalWorkflow(api.SignalCandidate, api.CandidateSignal{Revision: tt.rev(3)})
					}
				})
				h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: tt.target, Candidate: cand}})
				wantTraffic(t, mid, tgt(stable, 50, "prod"), latest, tgt(cand, 50, ""))
				got := h.objectTraffic(tt.target.Kind, tt.object)
				switch ending {
				case "success":
					if res := h.result(); res.Outcome != api.OutcomeSucceeded {
						t.Fatalf("result %+v", res)
					}
					wantTraffic(t, got, tgt(stable, 0, "prod"), latest, tgt(cand, 100, ""))
				case "supersede":
					var can *workflow.ContinueAsNewError
					if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
						t.Fatalf("workflow error = %v, want continue-as-new", err)
					}
					wantTraffic(t, got, original...)
				default:
					want := map[string]api.Outcome{"rollback": api.OutcomeRolledBack, "abort": api.OutcomeAborted}[ending]
					if res := h.result(); res.Outcome != want {
						t.Fatalf("result %+v, want %s", res, want)
					}
					wantTraffic(t, got, original...)
				}
			})
		}
	}
}

// The target's first Revision: a tagged latestRevision target keeps its tag.
func TestFirstRolloutKeepsTaggedLatestTargets(t *testing.T) {
	latest := func(pct int64, tag string) servingv1.TrafficTarget {
		return servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(pct), Tag: tag}
	}
	h := newHarness(t, knativefake.Service(ns, "s", nil, latest(100, ""), latest(0, "latest")), knativefake.Revision(ns, "s", 1, false))
	h.at(5*time.Second, func() { _ = h.k.SetRevisionReady(ns, "s-00001", "True", "", "") })
	h.env.ExecuteWorkflow(Rollout, RunInput{Input: api.Input{Target: knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: "s"}, Candidate: "s-00001"}})
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
	wantTraffic(t, h.traffic("s"), latest(0, "latest"), tgt("s-00001", 100, ""))
}

// Knative sent a latestRevision share to the candidate before sluice pinned
// it: sluice never takes it back, and at 100% there is nothing to do.
func TestKnativeGotThereFirst(t *testing.T) {
	latest := servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(int64(100))}
	h := newHarness(t, knativefake.Service(ns, "hello", nil, latest), knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, true))
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded || !strings.Contains(res.Reason, "Knative had already sent hello-00002 100% of the traffic") {
		t.Fatalf("result %+v", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00002", 100, ""))
}

func TestKnativeGotPartWayFirst(t *testing.T) {
	latest := servingv1.TrafficTarget{LatestRevision: new(true), Percent: new(int64(60))}
	h := newHarness(t, knativefake.Service(ns, "hello", nil, latest, tgt("hello-00001", 40, "")),
		knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, true))
	h.run("hello-00002")
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
	// Pinned where it was (60% on the candidate), then the first step above
	// 60%: 100%. The 10%, 25% and 50% steps are skipped, never written.
	st := h.status()
	wantTraffic(t, st.Baseline, tgt("hello-00002", 60, ""), tgt("hello-00001", 40, ""))
	if len(st.Steps) != 4 || !st.Steps[0].Skipped || !st.Steps[1].Skipped || !st.Steps[2].Skipped || st.Steps[3].Skipped {
		t.Fatalf("steps %+v", st.Steps)
	}
	if n := h.k.WriteCount("hello"); n != 2 {
		t.Fatalf("writes = %d, want 2 (pin, 100%%)", n)
	}
}

// refuseWrites makes the API server refuse Service writes, as Knative's
// webhook does when the template breaks a newly lowered cluster limit.
func (h *harness) refuseWrites() *atomic.Bool {
	var on atomic.Bool
	h.k.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !on.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewBadRequest(`admission webhook "validation.webhook.serving.knative.dev" denied the request: ` +
			`validation failed: expected 0 <= 500 <= 400: spec.template.spec.timeoutSeconds`)
	})
	return &on
}

func TestWriteRefusedOutsideTheListPauses(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	refused := h.refuseWrites()
	var paused api.Status
	var during []servingv1.TrafficTarget
	h.at(30*time.Second, func() { refused.Store(true) })
	h.at(3*time.Minute, func() {
		paused, during = h.status(), h.traffic("hello")
		refused.Store(false)
		h.update(api.CommandResume, api.Command{By: "ops", Reason: "timeoutSeconds lowered"})
	})
	h.run("hello-00002")
	if paused.Shown != api.PhasePaused || paused.Phase != api.PhaseStepping || paused.Weight != 25 ||
		!strings.Contains(paused.PauseReason, "spec.template.spec.timeoutSeconds") || !strings.Contains(paused.PauseReason, "resume") {
		t.Fatalf("while refused: shown %s phase %s weight %d reason %q", paused.Shown, paused.Phase, paused.Weight, paused.PauseReason)
	}
	wantTraffic(t, during, tgt("hello-00001", 67, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"), tgt("hello-00002", 23, ""))
	if res := h.result(); res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
}

func TestRollbackRefusedPausesUntilResumed(t *testing.T) {
	h := newHarness(t, helloObjects(nil, true)...)
	refused := h.refuseWrites()
	var paused api.Status
	var promote *updateResult
	h.at(30*time.Second, func() {
		refused.Store(true)
		h.update(api.CommandAbort, api.Command{By: "ops", Reason: "bad"})
	})
	h.at(3*time.Minute, func() {
		paused = h.status()
		promote = h.update(api.CommandPromote, api.Command{By: "ops"})
	})
	h.at(4*time.Minute, func() {
		refused.Store(false)
		h.update(api.CommandResume, api.Command{By: "ops"})
	})
	h.run("hello-00002")
	if paused.Phase != api.PhaseRollingBack || !paused.Paused || paused.Outcome != "" || paused.Ending != api.OutcomeAborted {
		t.Fatalf("while the rollback is refused: phase %s paused %v outcome %q ending %q", paused.Phase, paused.Paused, paused.Outcome, paused.Ending)
	}
	if !promote.rejectedWith("the rollback is paused") {
		t.Fatalf("promote while the rollback is paused: %+v", promote)
	}
	if res := h.result(); res.Outcome != api.OutcomeAborted {
		t.Fatalf("result %+v", res)
	}
	wantTraffic(t, h.traffic("hello"), tgt("hello-00001", 90, ""), tgt("hello-00000", 10, "legacy"), tgt("hello-00001", 0, "current"))
}
