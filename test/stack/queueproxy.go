package stack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"knative.dev/serving/pkg/apis/serving"
	servinginformers "knative.dev/serving/pkg/client/informers/externalversions"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/test/requestsim"
)

// queueProxyContainer is the name Knative gives its sidecar in every pod.
const queueProxyContainer = "queue-proxy"

// Network namespace numbers for pods with real queue-proxies.
const firstPodNetns, lastPodNetns = 10, 250

// queueProxies runs Knative's real queue-proxy, built unmodified, for every
// running pod of a Service that declares sluice analysis: each in a network
// namespace of its own that holds the pod's IP (the queue-proxy binds its
// ports on all addresses), with the environment Knative's controller wrote
// into the pod's queue-proxy container, in front of a stub user container
// (requestsim.App, behaving as the Revision's annotations say). The
// data-plane namespace routes the pod's IP there, so the autoscaler and
// Prometheus scrape the real queue-proxy and requestsim's requests pass
// through it. Other pods stay on the stand-in (requestsim.Stats): a
// queue-proxy costs tens of MiB, and the benchmark runs hundreds of pods
// nobody analyses.
type queueProxies struct {
	bridge   *Bridge
	router   string // the data-plane namespace
	bin, dir string
	sim      *requestsim.Sim
	log      *slog.Logger
	pods     func() ([]*corev1.Pod, error)
	analysed func(namespace, service string) bool
	wake     chan struct{}

	mu      sync.Mutex
	running map[string]*queueProxy // by pod name
	// published are the Revisions requestsim was given targets of.
	published map[string]bool
	free      []int
	// usage is what each stopped queue-proxy used.
	usage []procUsage
}

// queueProxy is one pod's real queue-proxy.
type queueProxy struct {
	pod, revision, ip, servingPort string
	n                              int
	proc                           *proc
	app                            *http.Server
	ready                          chan struct{}
	cancel                         context.CancelFunc
}

func newQueueProxies(s *Stack, router string, sim *requestsim.Sim) *queueProxies {
	q := &queueProxies{bridge: s.bridge, router: router, bin: filepath.Join(s.opts.Tools.ServingDir, "queue"),
		dir: s.opts.Dir, sim: sim, log: s.opts.Log, wake: make(chan struct{}, 1),
		running: map[string]*queueProxy{}, published: map[string]bool{}}
	for n := firstPodNetns; n <= lastPodNetns; n++ {
		q.free = append(q.free, n)
	}
	return q
}

// run keeps a queue-proxy for exactly the pods that should have one, until
// ctx ends; then it stops them all. It returns once the caches synced.
func (q *queueProxies) run(ctx context.Context, s *Stack) (done chan struct{}) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.Kube(), 0, informers.WithNamespace(Namespace))
	pods := factory.Core().V1().Pods()
	q.pods = func() ([]*corev1.Pod, error) { return pods.Lister().Pods(Namespace).List(labels.Everything()) }
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { q.poke() }, UpdateFunc: func(any, any) { q.poke() }, DeleteFunc: func(any) { q.poke() },
	}
	_, _ = pods.Informer().AddEventHandler(poke)
	sf := servinginformers.NewSharedInformerFactoryWithOptions(s.Serving, 0, servinginformers.WithNamespace(Namespace))
	services := sf.Serving().V1().Services()
	_, _ = services.Informer().AddEventHandler(poke)
	q.analysed = func(namespace, name string) bool {
		svc, err := services.Lister().Services(namespace).Get(name)
		return err == nil && svc.Annotations[config.AnnotationAnalysis] != ""
	}
	factory.Start(ctx.Done())
	sf.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	sf.WaitForCacheSync(ctx.Done())
	done = make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				q.mu.Lock()
				for name, qp := range q.running {
					q.stop(name, qp)
				}
				q.mu.Unlock()
				return
			case <-q.wake:
			case <-tick.C:
			}
			q.sync(ctx)
		}
	}()
	return done
}

func (q *queueProxies) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// sync starts and stops queue-proxies to match the pods, and tells
// requestsim which are serving.
func (q *queueProxies) sync(ctx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	pods, err := q.pods()
	if err != nil {
		q.log.Warn("queue-proxies: list pods", "error", err)
		return
	}
	want := map[string]*corev1.Pod{}
	for _, p := range pods {
		if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil &&
			hasQueueProxy(p) && q.analysed(p.Namespace, p.Labels[serving.ServiceLabelKey]) {
			want[p.Name] = p
		}
	}
	for name, qp := range q.running {
		if p, ok := want[name]; !ok || p.Status.PodIP != qp.ip {
			q.stop(name, qp)
		}
	}
	for name, p := range want {
		if _, ok := q.running[name]; ok {
			continue
		}
		qp, err := q.start(ctx, p)
		if err != nil {
			q.log.Warn("queue-proxies: start", "pod", name, "error", err)
			continue
		}
		q.running[name] = qp
	}
	// Every Revision published before gets its current list, empty once
	// its last queue-proxy is gone.
	targets := map[string][]string{}
	for rev := range q.published {
		targets[rev] = nil
	}
	for _, qp := range q.running {
		select {
		case <-qp.ready:
			targets[qp.revision] = append(targets[qp.revision], net.JoinHostPort(qp.ip, qp.servingPort))
		default:
		}
	}
	clear(q.published)
	for rev, addrs := range targets {
		sort.Strings(addrs)
		q.sim.SetTargets(rev, addrs)
		if len(addrs) > 0 {
			q.published[rev] = true
		}
	}
}

// envValue is key's value in env ("KEY=value" entries), or def.
func envValue(env []string, key, def string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, key+"="); ok {
			return v
		}
	}
	return def
}

func hasQueueProxy(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == queueProxyContainer })
}

// start gives pod p its namespace, user container and queue-proxy. It
// returns at once; ready closes when the queue-proxy takes requests.
func (q *queueProxies) start(ctx context.Context, p *corev1.Pod) (*queueProxy, error) {
	if len(q.free) == 0 {
		return nil, fmt.Errorf("no network namespace left for a queue-proxy (%d run)", len(q.running))
	}
	n := q.free[0]
	qp := &queueProxy{pod: p.Name, revision: p.Labels[serving.RevisionLabelKey], ip: p.Status.PodIP, n: n, ready: make(chan struct{})}
	env, err := queueProxyEnv(p)
	if err != nil {
		return nil, err
	}
	qp.servingPort = envValue(env, "QUEUE_SERVING_PORT", "8012")
	userPort := envValue(env, "USER_PORT", "8080")
	name, addr, err := q.bridge.Namespace(ctx, n)
	if err != nil {
		_ = q.bridge.RemoveNamespace(ctx, n)
		return nil, err
	}
	q.free = q.free[1:]
	fail := func(err error) (*queueProxy, error) {
		q.release(qp)
		return nil, err
	}
	if err := q.bridge.In(ctx, name, "addr", "add", qp.ip+"/32", "dev", q.bridge.peerLink(n)); err != nil {
		return fail(err)
	}
	// The local table is read first, and PodCIDR is all local in the
	// data-plane namespace: the pod's own route must be there too.
	if err := q.bridge.In(ctx, q.router, "route", "replace", qp.ip+"/32", "via", addr, "table", "local"); err != nil {
		return fail(err)
	}
	ln, err := q.bridge.Listen(name, "127.0.0.1:"+userPort)
	if err != nil {
		return fail(fmt.Errorf("listen for the user container: %w", err))
	}
	qp.app = &http.Server{Handler: &requestsim.App{Behaviour: requestsim.BehaviourOf(p.Annotations)}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = qp.app.Serve(ln) }()
	args := append(Exec(name), q.bin)
	qp.proc, err = startProc(q.dir, "queue-proxy-"+p.Name, env, args[0], args[1:]...)
	if err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	qp.cancel = cancel
	go func() {
		err := waitFor(wctx, qp.proc, "queue-proxy of "+p.Name, time.Minute, func() error {
			c, err := q.bridge.DialContext(q.router)(wctx, "tcp", net.JoinHostPort(qp.ip, qp.servingPort))
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			if wctx.Err() == nil {
				q.log.Warn("queue-proxies: not serving", "pod", p.Name, "error", err)
			}
			return
		}
		close(qp.ready)
		q.poke()
	}()
	return qp, nil
}

// stop kills the pod's queue-proxy (as its pod's deletion does: no drain)
// and removes its namespace, noting what it used.
func (q *queueProxies) stop(name string, qp *queueProxy) {
	delete(q.running, name)
	if qp.cancel != nil {
		qp.cancel()
	}
	if qp.proc != nil && qp.proc.cmd.Process != nil {
		if u, ok := readUsage(qp.proc.cmd.Process.Pid); ok {
			q.usage = append(q.usage, u)
		}
		qp.proc.kill()
	}
	q.release(qp)
}

func (q *queueProxies) release(qp *queueProxy) {
	ctx := context.Background()
	if qp.app != nil {
		_ = qp.app.Close()
	}
	_ = q.bridge.In(ctx, q.router, "route", "del", qp.ip+"/32", "table", "local")
	_ = q.bridge.RemoveNamespace(ctx, qp.n)
	q.free = append(q.free, qp.n)
}

// queueProxyEnv is the environment of p's queue-proxy container as Knative
// wrote it, with the pod fields it refers to filled in as the kubelet would.
func queueProxyEnv(p *corev1.Pod) ([]string, error) {
	for _, c := range p.Spec.Containers {
		if c.Name != queueProxyContainer {
			continue
		}
		var env []string
		for _, e := range c.Env {
			v := e.Value
			if e.ValueFrom != nil {
				if e.ValueFrom.FieldRef == nil {
					return nil, fmt.Errorf("pod %s: env %s comes from something other than a pod field", p.Name, e.Name)
				}
				switch e.ValueFrom.FieldRef.FieldPath {
				case "metadata.name":
					v = p.Name
				case "metadata.namespace":
					v = p.Namespace
				case "status.podIP":
					v = p.Status.PodIP
				case "status.hostIP":
					v = p.Status.HostIP
				default:
					return nil, fmt.Errorf("pod %s: env %s refers to %s", p.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
				}
			}
			env = append(env, e.Name+"="+v)
		}
		return env, nil
	}
	return nil, fmt.Errorf("pod %s has no %s container", p.Name, queueProxyContainer)
}

// procUsage is what one process used over its life.
type procUsage struct {
	peakKiB int64
	cpu     time.Duration
	life    time.Duration
}

// readUsage reads a live process's peak resident memory and CPU time.
func readUsage(pid int) (procUsage, bool) {
	var u procUsage
	kib, ok := statusKiB(pid, "VmHWM:")
	if !ok {
		return u, false
	}
	u.peakKiB = kib
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, false
	}
	// Fields after the command name (which may hold spaces): utime and
	// stime are the 12th and 13th, starttime the 20th, in clock ticks.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 20 {
		return u, false
	}
	var utime, stime, start int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	fmt.Sscan(f[19], &start)
	const hz = 100 // USER_HZ on Linux
	u.cpu = time.Duration(utime+stime) * time.Second / hz
	if up, err := os.ReadFile("/proc/uptime"); err == nil {
		var secs float64
		fmt.Sscan(string(up), &secs)
		u.life = time.Duration(secs*float64(time.Second)) - time.Duration(start)*time.Second/hz
	}
	return u, true
}

// statusKiB reads a "Name: 123 kB" field of /proc/pid/status.
func statusKiB(pid int, field string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib, true
		}
	}
	return 0, false
}

// QueueProxyUsage sums up the real queue-proxies the stack ran (those
// still running included): how many, their peak resident memory (median
// and largest), and their CPU time per minute of life.
func (s *Stack) QueueProxyUsage() string {
	q := s.queueProxies
	if q == nil {
		return "no queue-proxies"
	}
	q.mu.Lock()
	all := append([]procUsage(nil), q.usage...)
	for _, qp := range q.running {
		if u, ok := readUsage(qp.proc.cmd.Process.Pid); ok {
			all = append(all, u)
		}
	}
	q.mu.Unlock()
	if len(all) == 0 {
		return "no queue-proxies ran"
	}
	sort.Slice(all, func(i, j int) bool { return all[i].peakKiB < all[j].peakKiB })
	var cpu, life time.Duration
	for _, u := range all {
		cpu, life = cpu+u.cpu, life+u.life
	}
	perMin := 0.0
	if life > 0 {
		perMin = cpu.Seconds() / life.Minutes()
	}
	sent, failed, dropped := s.sim.Counts()
	return fmt.Sprintf("%d queue-proxies: peak RSS median %d MiB, largest %d MiB; CPU %.2f s per minute of life (%s over %s); "+
		"%d requests sent through them, %d without an answer, %d not sent (too many in flight)",
		len(all), all[len(all)/2].peakKiB/1024, all[len(all)-1].peakKiB/1024, perMin, cpu.Round(10*time.Millisecond), life.Round(time.Second),
		sent, failed, dropped)
}

// StandInScrapes is how many of the autoscaler's scrapes of pod IP ip the
// stand-in answered, rather than a real queue-proxy.
func (s *Stack) StandInScrapes(ip string) int { return s.stats.Scrapes(ip) }
