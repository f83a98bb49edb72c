package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/apis/autoscaling"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/requestsim"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/workflows/control"
)

const ns = stack.Namespace

// The plans a rollout can follow, and what each must end as.
const (
	planFirst        = "first"         // a Service's first Revision: pinned at 100%
	planSteps        = "steps"         // steps on holds, to the end
	planGate         = "gate"          // a manual gate, passed by a promote command
	planAbort        = "abort"         // aborted by command in a hold
	planDrift        = "drift"         // traffic edited by hand in a hold: paused, then resumed
	planSupersede    = "supersede"     // a newer Revision arrives in a hold
	planFail         = "fail"          // the candidate's container crashes
	planAnalysis     = "analysis"      // promoted by its analysis alone
	planAnalysisFail = "analysis-fail" // one request in four fails: analysis rolls it back
	planCapacity     = "capacity"      // capacity mode: pods and traffic move together
)

// minScale is every template's min-scale: the stable a capacity rollout
// starts from runs that many pods, so its stages and pod bound mean
// something (R=2, a surge of 1: stages of 50% and 100%, at most 3 pods).
const minScale = "2"

// analysisDoc's checks read the stack's real Prometheus, which scrapes the
// real queue-proxies requestsim's requests pass through. Their
// inconclusive limit outlasts a restarted API server: Prometheus finds
// new pods through it.
const analysisDoc = `
interval: 3s
window: 6s
checks:
  - name: success-rate
    builtin: success-rate
    inconclusiveLimit: 30
  - name: latency
    builtin: latency-p99
    max: 500
    inconclusiveLimit: 30
`

// expect is one rollout: what the workload did, and what its plan implies.
type expect struct {
	Service, Candidate, Stable string
	Plan                       string
	Steps                      []int64
	Outcome                    api.Outcome
	// Or is another outcome the plan allows, if any: a candidate that
	// reached 100% before sluice heard of a newer Revision succeeds.
	Or api.Outcome
	// Exact: the candidate's shares in sluice's writes are Steps, in order
	// (or a prefix of them, then 0, when the rollout is undone).
	Exact    bool
	Deployed time.Time
	// Ended is when the workload saw it end (zero if it never did); Got
	// the outcome and reason the rollout reported.
	Ended     time.Time
	Got       api.Outcome
	GotReason string
	// ReasonHas is what the reason must say, if anything.
	ReasonHas string
	// StablePods is the stable's pod count a capacity rollout's stages were
	// derived from (0 when the rollout made no capacity plan).
	StablePods int32
	// Notes are what the workload saw go wrong on the way (a drift that
	// did not pause the rollout, a command refused for good).
	Notes []string
}

// workload drives rollouts on its Services, each Service's one after
// another, until it has started its quota.
type workload struct {
	serving servingclient.Interface
	ctl     *control.Client
	log     *slog.Logger
	// left counts the rollouts still to start; timeout bounds each one.
	left    atomic.Int64
	timeout time.Duration
	// more, if set, starts rollouts past the quota while it says so: a
	// run goes on until every kind of fault has met rollouts in flight.
	more func() bool

	mu      sync.Mutex
	expects []*expect
	edits   int
}

func (w *workload) record(e *expect) {
	w.mu.Lock()
	w.expects = append(w.expects, e)
	w.mu.Unlock()
}

// Expects lists the rollouts so far.
func (w *workload) Expects() []*expect {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*expect(nil), w.expects...)
}

func (w *workload) take(n int64) bool {
	if w.left.Add(-n) >= 0 || (w.more != nil && w.more()) {
		return true
	}
	w.left.Add(n)
	return false
}

// pickPlan chooses a plan with the Service's own source.
func pickPlan(rng *rand.Rand) string {
	plans := []string{planSteps, planGate, planAbort, planDrift, planSupersede, planFail, planAnalysis, planAnalysisFail, planCapacity}
	return plans[rng.IntN(len(plans))]
}

// policy is each plan's annotations on the Service, and its steps.
func policy(plan string) (map[string]string, []int64) {
	// The worker's default deadlines: its verify timeout (2m) outlasts a
	// failover of Knative's controller (a leader lease of 60 s).
	ann := map[string]string{"sluice.dev/rollout": "enabled"}
	var steps []int64
	switch plan {
	case planSteps, planFirst:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], steps = "20,50,100", "1s", []int64{20, 50, 100}
	case planGate:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], ann["sluice.dev/gates"], steps = "20,60,100", "1s", "60", []int64{20, 60, 100}
	case planAbort:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], steps = "30,100", "10m", []int64{30, 100}
	case planDrift:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], steps = "30,60,100", "6s", []int64{30, 60, 100}
	case planSupersede:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], steps = "40,100", "6s", []int64{40, 100}
	case planFail:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], steps = "50,100", "1s", []int64{50, 100}
	case planAnalysis, planAnalysisFail:
		ann["sluice.dev/steps"], ann["sluice.dev/hold"], ann["sluice.dev/analysis"], steps = "20,60,100", "7s", analysisDoc, []int64{20, 60, 100}
	case planCapacity:
		// Stages derived from the stable's 2 pods and a surge of 1. The
		// stage timeout pauses a stage whose pods do not come; it outlasts
		// a restarted API server.
		ann["sluice.dev/capacity"], ann["sluice.dev/capacity-surge"], ann["sluice.dev/hold"], steps = "availability", "1", "2s", []int64{50, 100}
	}
	return ann, steps
}

// drive runs one Service's rollouts: its first, then plans at random.
func (w *workload) drive(ctx context.Context, name string, rng *rand.Rand) error {
	ann, _ := policy(planFirst)
	first := &expect{Service: name, Candidate: name + "-00001", Plan: planFirst, Steps: []int64{100}, Outcome: api.OutcomeSucceeded, Exact: true}
	if err := w.deploy(ctx, name, 1, ann, template(), first); err != nil {
		return err
	}
	if !w.await(ctx, first, true) {
		return nil
	}
	// A tagged target every later rollout must leave alone.
	base := servingv1.TrafficTarget{RevisionName: name + "-00001", Percent: new(int64(0)), Tag: "base"}
	if err := w.patchTraffic(ctx, name, []servingv1.TrafficTarget{{RevisionName: name + "-00001", Percent: new(int64(100))}, base}); err != nil {
		return err
	}
	stable, gen := first.Candidate, 1
	for ctx.Err() == nil {
		plan := pickPlan(rng)
		n := int64(1)
		if plan == planSupersede {
			n = 2
		}
		if !w.take(n) {
			return nil
		}
		gen++
		ann, steps := policy(plan)
		e := &expect{Service: name, Candidate: fmt.Sprintf("%s-%05d", name, gen), Stable: stable, Plan: plan, Steps: steps,
			Outcome: api.OutcomeSucceeded, Exact: plan == planSteps || plan == planGate || plan == planAbort || plan == planAnalysis || plan == planAnalysisFail}
		tmpl := template()
		tmpl[stack.AnnotationReadyAfter] = fmt.Sprintf("%dms", rng.IntN(3000))
		switch plan {
		case planAbort:
			e.Outcome = api.OutcomeAborted
		case planFail:
			e.Outcome, e.ReasonHas = api.OutcomeRolledBack, "ExitCode1"
			tmpl = template()
			tmpl[stack.AnnotationFail] = "true"
		case planAnalysisFail:
			e.Outcome, e.ReasonHas = api.OutcomeRolledBack, "analysis: success-rate failed"
			tmpl[requestsim.AnnotationErrorRate] = "0.25"
		case planSupersede:
			e.Outcome, e.Or = api.OutcomeSuperseded, api.OutcomeSucceeded
		}
		if err := w.deploy(ctx, name, gen, ann, tmpl, e); err != nil {
			return err
		}
		last := e
		switch plan {
		case planGate:
			where, at := in(e, api.PhaseGate, steps[0])
			w.command(ctx, e, where, at, api.CommandPromote)
		case planAbort:
			where, at := in(e, api.PhaseHolding, steps[0])
			w.command(ctx, e, where, at, api.CommandAbort)
		case planDrift:
			w.drift(ctx, e, stable, base)
		case planSupersede:
			// It may also end before the workload sees it hold (its status
			// unreadable through a fault): then it is not superseded, which
			// its plan allows.
			if w.waitFor(ctx, e, "its first hold", e.Or, func(s api.Status) bool {
				return s.Candidate == e.Candidate && s.Phase == api.PhaseHolding
			}) {
				gen++
				last = &expect{Service: name, Candidate: fmt.Sprintf("%s-%05d", name, gen), Stable: stable, Plan: plan, Steps: steps,
					Outcome: api.OutcomeSucceeded}
				if err := w.deploy(ctx, name, gen, ann, template(), last); err != nil {
					return err
				}
			}
		}
		if !w.await(ctx, e, last == e) {
			return nil
		}
		if e.Got == api.OutcomeSucceeded {
			// A candidate that succeeded before the next one's rollout began
			// is that one's stable.
			stable = e.Candidate
			if last != e {
				last.Stable = e.Candidate
			}
		}
		if last != e && !w.await(ctx, last, true) {
			return nil
		}
		if last.Got == api.OutcomeSucceeded {
			stable = last.Candidate
		}
	}
	return nil
}

// template is the annotations every Revision's template carries.
func template() map[string]string {
	return map[string]string{
		// The stack gives Knative's Deployments a progress deadline of
		// 15 s, for tests of Revisions that never turn Ready; a pod held
		// up by a restarted API server must not fail its Revision.
		serving.ProgressDeadlineAnnotationKey: "5m",
		autoscaling.MinScaleAnnotationKey:     minScale,
	}
}

// deploy creates the Service or changes its policy and template at once,
// as `kn service update` would, retrying through faults.
func (w *workload) deploy(ctx context.Context, name string, gen int, ann, tmpl map[string]string, e *expect) error {
	image := fmt.Sprintf("example.com/%s:v%d", name, gen)
	svcs := w.serving.ServingV1().Services(ns)
	e.Deployed = time.Now()
	w.record(e)
	return w.retry(ctx, "deploy "+e.Candidate, func() error {
		svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			svc = &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann}}
			svc.Spec.Template.Annotations = tmpl
			svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
			_, err = svcs.Create(ctx, svc, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if c := svc.Spec.Template.Spec.Containers; len(c) == 1 && c[0].Image == image {
			return nil // an earlier attempt went through, its answer lost
		}
		// The policy is the plan's alone: no gate of an earlier plan stays.
		for _, k := range []string{"sluice.dev/steps", "sluice.dev/hold", "sluice.dev/gates", "sluice.dev/analysis",
			"sluice.dev/capacity", "sluice.dev/capacity-surge"} {
			delete(svc.Annotations, k)
		}
		for k, v := range ann {
			svc.Annotations[k] = v
		}
		svc.Spec.Template.Annotations = tmpl
		svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
		_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
}

func (w *workload) patchTraffic(ctx context.Context, name string, traffic []servingv1.TrafficTarget) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"traffic": traffic}})
	return w.retry(ctx, "edit the traffic of "+name, func() error {
		_, err := w.serving.ServingV1().Services(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// retry retries what the workload does through the faults, for up to two
// minutes: the faults end, so a write that still fails is a finding.
func (w *workload) retry(ctx context.Context, what string, fn func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// status reads a rollout's status, retrying through faults; ok is false
// once ctx ends.
func (w *workload) status(ctx context.Context, service string) (api.Status, bool) {
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := w.ctl.Status(qctx, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: service})
		cancel()
		if err == nil {
			return st, true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return api.Status{}, false
}

// waitFor polls e's rollout until cond holds, up to the workload's timeout.
// A rollout that ends first is noted, unless it ends as endOK.
func (w *workload) waitFor(ctx context.Context, e *expect, what string, endOK api.Outcome, cond func(api.Status) bool) bool {
	deadline := time.Now().Add(w.timeout)
	var last api.Status
	for time.Now().Before(deadline) {
		st, ok := w.status(ctx, e.Service)
		if !ok {
			return false
		}
		last = st
		if cond(st) {
			return true
		}
		if st.Candidate == e.Candidate && st.Phase.Done() {
			if endOK == "" || st.Outcome != endOK {
				e.Notes = append(e.Notes, fmt.Sprintf("ended %s (%s) before %s", st.Outcome, st.Reason, what))
			}
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	note := fmt.Sprintf("%s not reached within %s; last seen: %s, step %d, %d%%", what, w.timeout, last.Phase, last.StepNumber, last.Weight)
	if last.Paused {
		note += ", paused: " + last.PauseReason
	}
	e.Notes = append(e.Notes, note)
	return false
}

// in is the condition that a rollout is in phase at weight, not paused.
func in(e *expect, phase api.Phase, weight int64) (string, func(api.Status) bool) {
	return fmt.Sprintf("%s at %d%%", phase, weight), func(s api.Status) bool {
		return s.Candidate == e.Candidate && s.Phase == phase && s.Weight == weight && !s.Paused
	}
}

// command sends a command once the rollout is where at says, and again
// only while it still is: an answer lost to a fault must not pass a second
// gate.
func (w *workload) command(ctx context.Context, e *expect, where string, at func(api.Status) bool, cmd string) {
	for ctx.Err() == nil {
		if !w.waitFor(ctx, e, where, "", at) {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := w.ctl.Send(sctx, knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: e.Service}, cmd, "chaos")
		cancel()
		var rejected *control.RejectedError
		if err == nil || errors.As(err, &rejected) {
			if err != nil {
				e.Notes = append(e.Notes, fmt.Sprintf("%s refused: %v", cmd, err))
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
		if st, ok := w.status(ctx, e.Service); ok && !at(st) {
			return // it went through; its answer was lost
		}
	}
}

// drift edits the candidate's traffic by hand in its first hold (an
// operator's kubectl), waits for the rollout to pause, and resumes it.
func (w *workload) drift(ctx context.Context, e *expect, stable string, base servingv1.TrafficTarget) {
	// Like a supersede, it may end before the workload sees it hold (its
	// status unreadable through a fault): it then succeeds undrifted.
	if !w.waitFor(ctx, e, "the first hold", api.OutcomeSucceeded, func(s api.Status) bool {
		return s.Candidate == e.Candidate && s.Phase == api.PhaseHolding && s.Weight == e.Steps[0]
	}) {
		return
	}
	edited := []servingv1.TrafficTarget{{RevisionName: stable, Percent: new(int64(55))}, {RevisionName: e.Candidate, Percent: new(int64(45))}, base}
	if err := w.patchTraffic(ctx, e.Service, edited); err != nil {
		e.Notes = append(e.Notes, "the hand edit failed: "+err.Error())
		return
	}
	w.mu.Lock()
	w.edits++
	w.mu.Unlock()
	w.command(ctx, e, "the pause for the hand edit", func(s api.Status) bool { return s.Candidate == e.Candidate && s.Paused }, api.CommandResume)
}

// await waits for e's rollout to end, and records how, then, with closed,
// for its workflow to close; false if it did not within the workload's
// timeout (the Service is then left alone).
func (w *workload) await(ctx context.Context, e *expect, closed bool) bool {
	var got api.Status
	ended := w.waitFor(ctx, e, "the end", "", func(s api.Status) bool {
		got = s
		if s.Candidate == e.Candidate && s.Phase.Done() {
			return true
		}
		// A superseded candidate ends as the next one takes over.
		for _, c := range s.Superseded {
			if c == e.Candidate {
				return true
			}
		}
		return false
	})
	if !ended {
		return false
	}
	e.Ended = time.Now()
	if got.Candidate == e.Candidate {
		e.Got, e.GotReason = got.Outcome, got.Reason
		if got.Capacity != nil {
			e.StablePods = got.Capacity.StablePods
		}
	} else {
		e.Got, e.GotReason = api.OutcomeSuperseded, "superseded by "+got.Candidate
	}
	if got.Candidate != e.Candidate || !closed {
		return true
	}
	// The next Revision must start a rollout of its own, not join this one.
	for time.Now().Before(e.Ended.Add(w.timeout)) {
		d, err := w.ctl.Temporal.DescribeWorkflowExecution(ctx, api.RolloutID(knative.TargetRef{Namespace: ns, Kind: knative.KindService, Name: e.Service}), "")
		if err == nil && d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.Notes = append(e.Notes, "its workflow did not close after it ended")
	return false
}

// touch is the concurrent writer: it changes a Service's metadata now and
// then, so sluice's writes follow reads of an older resourceVersion (they
// test the generation, which a metadata write leaves alone), until ctx ends.
func (w *workload) touch(ctx context.Context, names []string, rng *rand.Rand) int {
	n := 0
	for ctx.Err() == nil {
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		name := names[rng.IntN(len(names))]
		svc, err := w.serving.ServingV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		svc.Annotations["example.com/touched"] = fmt.Sprint(n)
		if _, err := w.serving.ServingV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err == nil {
			n++
		}
	}
	return n
}
