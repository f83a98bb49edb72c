// Package demo tells sluice's story on the local stack: a Service is
// deployed, a new Revision rolls out step by step and stops at a manual
// gate, a person promotes it, then a failing Revision is rolled back on its
// own, and last a Revision answering 20% of its requests with errors is
// rolled back by its analysis. `make demo` runs it through test/cmd/sluice-dev.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/eventsink"
	"github.com/sluicehq/sluice/test/requestsim"
	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/workflows/control"
)

// Options shape a demo run.
type Options struct {
	// Unattended promotes by itself and exits; otherwise the demo waits for
	// a person's `sluice promote` and keeps the stack up until ctx ends.
	Unattended bool
	// Dir holds the stack's data and logs.
	Dir          string
	Tools        stack.Tools
	Root         string
	TemporalPort int
	UIPort       int
	Out          io.Writer
}

const service = "hello"

// Run tells the story and reports whether every expected outcome was seen.
func Run(ctx context.Context, o Options) error {
	out := o.Out
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	crds, err := stack.KnativeCRDDirs(ctx, o.Root)
	if err != nil {
		return err
	}
	sink, stopSink := eventsink.Start()
	defer stopSink()
	say("Starting the local stack (Kubernetes, kwok's fake node, Knative Serving's controller, webhook and autoscaler, Temporal, ApiServerSource, Prometheus, sluice)...")
	begin := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		Dir: o.Dir, Tools: o.Tools, Root: o.Root, CRDDirs: crds, Adapter: true, ProgressSink: sink.URL,
		TemporalPort: o.TemporalPort, UIPort: o.UIPort, Prometheus: true,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer s.Stop()
	say("Stack up in %s. Logs: %s", time.Since(begin).Round(time.Second), o.Dir)
	if s.UIURL != "" {
		say("Temporal UI: %s/namespaces/default/workflows", s.UIURL)
	}
	tc, err := client.Dial(client.Options{HostPort: s.TemporalAddr, Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		return err
	}
	defer tc.Close()
	c := &control.Client{Temporal: tc, TaskQueue: api.DefaultTaskQueue, Identity: "demo"}
	target := knative.TargetRef{Namespace: stack.Namespace, Kind: knative.KindService, Name: service}
	go printProgress(ctx, sink, say)

	say("\n1. Deploying Service %s (opted in: steps 10,50,100, 4s holds, a manual gate before 100%%,\n   analysis of the candidate's success rate and p99 latency from Prometheus every 3s)", service)
	if err := deploy(ctx, s, "example.com/hello:v1", nil); err != nil {
		return err
	}
	if _, err := waitEnd(ctx, c, target, "hello-00001"); err != nil {
		return err
	}
	say("   hello-00001 serves %s", traffic(ctx, s))

	say("\n2. Deploying a new Revision: hello-00002 rolls out")
	if err := deploy(ctx, s, "example.com/hello:v2", nil); err != nil {
		return err
	}
	if err := waitFor(ctx, c, target, func(st api.Status) bool {
		return st.Candidate == "hello-00002" && st.Phase == api.PhaseGate
	}); err != nil {
		return err
	}
	say("   Waiting at the manual gate, traffic %s", traffic(ctx, s))
	promote := fmt.Sprintf("%s promote %s --address %s --reason \"looks good\"", o.Tools.Sluice, service, s.TemporalAddr)
	if o.Unattended {
		say("   Promoting (unattended): %s", promote)
		if _, err := c.Send(ctx, target, api.CommandPromote, "unattended demo"); err != nil {
			return err
		}
	} else {
		say("\n   To continue, run in another terminal:\n\n     %s\n", promote)
	}
	st, err := waitEnd(ctx, c, target, "hello-00002")
	if err != nil {
		return err
	}
	var problems []string
	if st.Outcome != api.OutcomeSucceeded || traffic(ctx, s) != "hello-00002=100%" {
		problems = append(problems, fmt.Sprintf("hello-00002: want Succeeded with 100%%, got %s (%s) with %s", st.Outcome, st.Reason, traffic(ctx, s)))
	}
	say("   %s: %s", st.Outcome, st.Reason)
	if an := st.Analysis; an != nil {
		for _, t := range an.Tallies {
			if t.Last != nil && t.Last.Value != nil {
				say("   Analysis: %s last %s, %d of %d measurements passed", t.Name, analysis.FormatValue(*t.Last.Value), t.Passed, t.Measured)
			}
		}
	}

	say("\n3. Deploying a Revision that fails: hello-00003 is rolled back on its own")
	if err := deploy(ctx, s, "example.com/hello:v3-broken", map[string]string{stack.AnnotationFail: "true"}); err != nil {
		return err
	}
	st, err = waitEnd(ctx, c, target, "hello-00003")
	if err != nil {
		return err
	}
	say("   %s: %s", st.Outcome, st.Reason)
	say("   Traffic: %s", traffic(ctx, s))
	if st.Outcome != api.OutcomeRolledBack || traffic(ctx, s) != "hello-00002=100%" {
		problems = append(problems, fmt.Sprintf("hello-00003: want RolledBack with hello-00002 at 100%%, got %s with %s", st.Outcome, traffic(ctx, s)))
	}

	say("\n4. Deploying a Revision that answers 20%% of its requests with 500: its analysis rolls hello-00004 back")
	if err := deploy(ctx, s, "example.com/hello:v4-flaky", map[string]string{requestsim.AnnotationErrorRate: "0.2"}); err != nil {
		return err
	}
	st, err = waitEnd(ctx, c, target, "hello-00004")
	if err != nil {
		return err
	}
	say("   %s: %s", st.Outcome, st.Reason)
	say("   Traffic: %s", traffic(ctx, s))
	if st.Outcome != api.OutcomeRolledBack || !strings.Contains(st.Reason, "analysis: success-rate failed") || traffic(ctx, s) != "hello-00002=100%" {
		problems = append(problems, fmt.Sprintf("hello-00004: want RolledBack by the success-rate check with hello-00002 at 100%%, got %s (%s) with %s", st.Outcome, st.Reason, traffic(ctx, s)))
	}
	// The last progress event is sent just after the rollout's status reads
	// as ended: give the sends a moment.
	for _, want := range []string{events.ProgressStarted, events.ProgressStep, events.ProgressPromoted, events.ProgressSucceeded, events.ProgressRolledBack, events.ProgressAnalysis} {
		deadline := time.Now().Add(15 * time.Second)
		for !sink.Has(want) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !sink.Has(want) {
			problems = append(problems, "no "+want+" progress event")
		}
	}
	if len(problems) > 0 {
		return errors.New("the demo did not go as expected:\n  " + strings.Join(problems, "\n  "))
	}
	say("\nEvery expected outcome was observed.")
	if o.Unattended {
		return nil
	}
	say(handsOn, s.Kubeconfig, filepath.Join(o.Tools.KubeDir, "kubectl"), stack.Namespace, o.Tools.Sluice, s.TemporalAddr)
	<-ctx.Done()
	return nil
}

// handsOn is how to use the stack by hand once the story is told.
const handsOn = `
The stack stays up, with Knative Serving's own controller, webhook and autoscaler: try your own
Service against it (Ctrl-C stops everything). In another terminal:

  export KUBECONFIG=%[1]s
  alias kubectl=%[2]s
  kubectl apply -f - <<'EOF'
  apiVersion: serving.knative.dev/v1
  kind: Service
  metadata:
    name: mine
    namespace: %[3]s
    annotations:
      sluice.dev/rollout: enabled
      sluice.dev/steps: "25,50,100"
      sluice.dev/hold: 10s
  spec:
    template:
      spec:
        containers:
        - image: dev.local/mine:v1
  EOF
  # a new Revision rolls out in steps; watch it, or in the Temporal UI:
  kubectl patch ksvc mine --type merge -p '{"spec":{"template":{"spec":{"containers":[{"image":"dev.local/mine:v2"}]}}}}'
  %[4]s status mine --watch --address %[5]s
  kubectl get ksvc,revisions,pods

Images are never pulled (dev.local names are not resolved; kwok plays the pods). The template
annotation sim.sluice.dev/fail: "true" makes a Revision's container crash, never-ready: "true"
keeps it unready, ready-after: 5s delays it; sim.sluice.dev/error-rate: "0.2" and latency: 800ms
make the stub container behind its real queue-proxy answer badly.
`

// demoAnalysis checks the candidate with the built-in Knative checks, over
// what its real queue-proxies export. A new pod's first series reach the
// stack's Prometheus some seconds after it starts (discovery sends new
// targets at most every 5 s, then it scrapes every second), so a check
// tolerates three rounds without data.
const demoAnalysis = `interval: 3s
window: 5s
checks:
  - {name: success-rate, builtin: success-rate, inconclusiveLimit: 3}
  - {name: latency-p99, builtin: latency-p99, max: 250, inconclusiveLimit: 3}
`

func deploy(ctx context.Context, s *stack.Stack, image string, templateAnn map[string]string) error {
	svcs := s.Serving.ServingV1().Services(stack.Namespace)
	for attempt := 0; attempt < 10; attempt++ {
		svc, err := svcs.Get(ctx, service, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			svc = &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: stack.Namespace, Annotations: map[string]string{
				"sluice.dev/rollout": "enabled", "sluice.dev/steps": "10,50,100", "sluice.dev/hold": "4s", "sluice.dev/gates": "100",
				"sluice.dev/analysis": demoAnalysis,
			}}}
			svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
			_, err = svcs.Create(ctx, svc, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		svc.Spec.Template.Annotations = templateAnn
		svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: image}}
		if _, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("update Service %s: conflicts", service)
}

func traffic(ctx context.Context, s *stack.Stack) string {
	svc, err := s.Serving.ServingV1().Services(stack.Namespace).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return knative.FormatTraffic(svc.Spec.Traffic)
}

func waitFor(ctx context.Context, c *control.Client, t knative.TargetRef, cond func(api.Status) bool) error {
	for {
		st, err := c.Status(ctx, t)
		if err == nil && cond(st) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waitEnd(ctx context.Context, c *control.Client, t knative.TargetRef, candidate string) (api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var st api.Status
	err := waitFor(ctx, c, t, func(s api.Status) bool {
		st = s
		return s.Candidate == candidate && s.Phase.Done()
	})
	return st, err
}

// printProgress prints each progress event as it arrives: the live view.
func printProgress(ctx context.Context, sink *eventsink.Sink, say func(string, ...any)) {
	seen := 0
	for ctx.Err() == nil {
		evs := sink.Events()
		for _, e := range evs[seen:] {
			say("   [event] %s", describe(e))
		}
		seen = len(evs)
		time.Sleep(100 * time.Millisecond)
	}
}

func describe(e cloudevents.Event) string {
	var d events.ProgressData
	_ = json.Unmarshal(e.Data(), &d)
	typ := strings.TrimPrefix(e.Type(), events.ProgressPrefix)
	switch typ {
	case "step":
		return fmt.Sprintf("step %d/%d: %s at %d%% — %s", d.Step, d.StepCount, d.Candidate, d.Weight, d.Traffic)
	case "promoted":
		return fmt.Sprintf("promoted by %s", d.By)
	}
	s := typ + ": " + d.Candidate
	if d.Reason != "" {
		s += " — " + d.Reason
	}
	return s
}
