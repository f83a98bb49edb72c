package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/test/stack"
)

// fault is one injected fault: what, on what, and when it began and ended.
type fault struct {
	Kind  string
	On    string
	Start time.Time
	End   time.Time
	// Settled is, after a fault of the control plane, when Knative
	// programmed traffic again (see settle).
	Settled time.Time
	Detail  string
}

// faultKinds are the kinds of fault, each a function of the injector. A
// network fault's kind is "net-" plus the toxic, and its On the link. On
// Temporal's production topology (cluster) the dev server's restart gives
// way to a fault of each of its parts: the frontend restarted, a history
// or matching service killed while the others stay up, and PostgreSQL
// restarted after a crash.
func faultKinds(cluster bool) []string {
	temporal := []string{"restart-temporal"}
	if cluster {
		temporal = []string{"restart-temporal-frontend", "kill-temporal-history", "kill-temporal-matching", "restart-postgres"}
	}
	kinds := append([]string{"kill-worker", "kill-receiver"}, temporal...)
	return append(kinds, "restart-kube-apiserver", "restart-knative-controller", "net-latency", "net-timeout", "net-reset", "net-down")
}

// restartOf names the component a fault of one of these kinds kills and
// starts again, with nothing more to wait for than the component itself.
var restartOf = map[string]string{
	"kill-receiver":             stack.Receiver,
	"restart-temporal":          stack.Temporal,
	"restart-temporal-frontend": stack.TemporalFrontend,
	"kill-temporal-history":     stack.TemporalHistory,
	"kill-temporal-matching":    stack.TemporalMatching,
	"restart-postgres":          stack.Postgres,
}

// injector works through its kinds at random moments, one fault at a
// time, from its own seeded source: the same seed makes the same faults in
// the same order, with the same durations and pauses.
type injector struct {
	stk     *stack.Stack
	net     *network
	rng     *rand.Rand
	workers []string // the worker processes, by name
	kinds   []string // faultKinds of the stack's Temporal
	log     *slog.Logger

	// probes counts the probe Service's tags (see settle).
	probes int

	mu     sync.Mutex
	faults []fault
}

// probe is a Service no rollout touches, whose traffic the injector tags to
// see that Knative programs traffic again after a fault (see settle).
const probe = "probe"

// run injects faults in rounds: every kind once a round, in an order the
// seed shuffles, so even a short run meets each kind.
func (in *injector) run(ctx context.Context) error {
	var round []int
	for {
		pause := time.Duration(2000+in.rng.IntN(6000)) * time.Millisecond
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		if len(round) == 0 {
			round = in.rng.Perm(len(in.kinds))
		}
		kind := in.kinds[round[0]]
		round = round[1:]
		f, err := in.inject(ctx, kind)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fault %s on %s: %w", f.Kind, f.On, err)
		}
		in.log.Info("chaos: fault", "kind", f.Kind, "on", f.On, "for", f.End.Sub(f.Start).Round(time.Millisecond), "detail", f.Detail)
		in.mu.Lock()
		in.faults = append(in.faults, f)
		in.mu.Unlock()
	}
}

// untried says whether some kind of fault has not been injected yet.
func (in *injector) untried() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, k := range in.kinds {
		if !slices.ContainsFunc(in.faults, func(f fault) bool { return f.Kind == k }) {
			return true
		}
	}
	return false
}

// Faults lists the faults injected so far.
func (in *injector) Faults() []fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]fault(nil), in.faults...)
}

// inject carries out one fault and returns once its component is back or
// its link healed. The restart runs even if ctx ends meanwhile, so the
// stack is whole for the checks that follow.
func (in *injector) inject(ctx context.Context, kind string) (fault, error) {
	f := fault{Kind: kind}
	down := time.Duration(in.rng.IntN(5000)) * time.Millisecond
	restart := func(name string) error {
		f.On, f.Start = name, time.Now()
		if err := in.stk.Kill(name); err != nil {
			return err
		}
		time.Sleep(down)
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err := in.stk.Restart(bg, name)
		f.End = time.Now()
		f.Detail = fmt.Sprintf("down %s", down.Round(time.Millisecond))
		return err
	}
	if name, ok := restartOf[kind]; ok {
		return f, restart(name)
	}
	switch kind {
	case "kill-worker":
		return f, restart(in.workers[in.rng.IntN(len(in.workers))])
	case "restart-kube-apiserver":
		if err := restart(stack.APIServer); err != nil {
			return f, err
		}
		return f, in.settle(ctx, &f)
	case "restart-knative-controller":
		// Back is when the new process leads again: until the old one's
		// lease expires (60 s, Knative's default) nothing reconciles.
		before := in.serviceReconcilerHolder(ctx)
		if err := restart(stack.KnativeController); err != nil {
			return f, err
		}
		crashes := 0
		for deadline := time.Now().Add(5 * time.Minute); in.serviceReconcilerHolder(ctx) == before; {
			if time.Now().After(deadline) {
				return f, fmt.Errorf("the restarted controller does not lead after 5m (it crashed %d times as it started)", crashes)
			}
			// Knative's controller exits when it cannot read its config
			// maps as it starts (an API server too busy to answer in
			// time): a kubelet would start it again, and so does this.
			if in.stk.Exited(stack.KnativeController) {
				crashes++
				in.log.Warn("chaos: Knative's controller exited as it started; starting it again", "log", tail(in.stk.Log(stack.KnativeController), 300))
				bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				err := in.stk.Restart(bg, stack.KnativeController)
				cancel()
				if err != nil && !in.stk.Exited(stack.KnativeController) {
					return f, err
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		if crashes > 0 {
			f.Detail += fmt.Sprintf("; it crashed %d times as it started, and was started again", crashes)
		}
		f.End = time.Now()
		return f, in.settle(ctx, &f)
	}
	links := []string{stack.APIServer, stack.Temporal}
	f.On = links[in.rng.IntN(len(links))]
	p := in.net.proxies[f.On]
	span := time.Duration(2000+in.rng.IntN(8000)) * time.Millisecond
	var toxic string
	var attrs toxiclient.Attributes
	switch kind {
	case "net-latency":
		toxic = "latency"
		attrs = toxiclient.Attributes{"latency": 100 + in.rng.IntN(900), "jitter": in.rng.IntN(300)}
	case "net-timeout":
		// Data stops flowing, and connections close after the timeout.
		toxic = "timeout"
		attrs = toxiclient.Attributes{"timeout": 500 + in.rng.IntN(4500)}
	case "net-reset":
		toxic = "reset_peer"
		attrs = toxiclient.Attributes{"timeout": in.rng.IntN(500)}
	}
	f.Start = time.Now()
	if kind == "net-down" {
		if err := p.Disable(); err != nil {
			return f, err
		}
		time.Sleep(span)
		f.End, f.Detail = time.Now(), "link cut"
		return f, p.Enable()
	}
	// Both ways: what sluice sends and what it is answered.
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.AddToxic(toxic+"-"+stream, toxic, stream, 1, attrs); err != nil {
			return f, err
		}
	}
	time.Sleep(span)
	var err error
	for _, stream := range []string{"upstream", "downstream"} {
		if e := p.RemoveToxic(toxic + "-" + stream); e != nil {
			err = e
		}
	}
	f.End, f.Detail = time.Now(), fmt.Sprint(attrs)
	return f, err
}

// settle waits, after a fault of the control plane, until Knative programs
// traffic again: it tags the probe Service's Revision anew and waits for the
// tag in its status, which takes Knative's controller, the KIngress
// stand-in and their informers. Their watches come back on client-go's
// backoff (up to 30 s, jittered), so this can take a minute after the API
// server is back. Faults come one at a time: the next waits for this.
func (in *injector) settle(ctx context.Context, f *fault) error {
	in.probes++
	tag := fmt.Sprintf("p%d", in.probes)
	ctx = context.WithoutCancel(ctx)
	svcs := in.stk.Serving.ServingV1().Services(ns)
	patch := fmt.Sprintf(`{"spec":{"traffic":[{"latestRevision":true,"percent":100},{"revisionName":%q,"tag":%q}]}}`, probe+"-00001", tag)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, err := svcs.Patch(ctx, probe, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tag the probe Service: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		svc, err := svcs.Get(ctx, probe, metav1.GetOptions{})
		if err == nil && svc.Status.ObservedGeneration == svc.Generation && svc.IsReady() && slices.ContainsFunc(svc.Status.Traffic, func(t servingv1.TrafficTarget) bool { return t.Tag == tag }) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Knative did not program the probe Service's tag %s within 5m", tag)
		}
		time.Sleep(200 * time.Millisecond)
	}
	f.Settled = time.Now()
	f.Detail += fmt.Sprintf("; Knative programmed traffic again %s after", f.Settled.Sub(f.End).Round(100*time.Millisecond))
	return nil
}

// serviceReconcilerHolder is who holds the lease of Knative's Service
// reconciler ("" if unread).
func (in *injector) serviceReconcilerHolder(ctx context.Context) string {
	leases, err := in.stk.Kube().CoordinationV1().Leases("knative-serving").List(context.WithoutCancel(ctx), metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "controller.knative.dev.serving.pkg.reconciler.service.") && l.Spec.HolderIdentity != nil {
			return *l.Spec.HolderIdentity
		}
	}
	return ""
}

// tail is the end of a log, for a line of the run's own.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
