package stack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	informers "knative.dev/serving/pkg/client/informers/externalversions"

	"github.com/sluicehq/sluice/test/ingress"
	"github.com/sluicehq/sluice/test/requestsim"
	"github.com/sluicehq/sluice/test/servingstandin"
)

// The network namespaces of the full stack, by number on its bridge.
const (
	netnsWebhook    = 2
	netnsController = 3
	netnsDataPlane  = 4
	netnsAutoscaler = 5
	netnsPrometheus = 6
	// The ApiServerSource adapter serves its probes on a hard-coded port
	// (8080): in a namespace of its own, stacks run side by side.
	netnsAdapter = 7
)

func (s *Stack) startBridge(ctx context.Context) error {
	b, err := NewBridge(ctx)
	if err != nil {
		return err
	}
	s.bridge = b
	s.opts.APIServerAddress, s.opts.AggregatorRouting = b.Host, true
	return nil
}

func (s *Stack) startKnativeWebhook(ctx context.Context) error {
	mods, err := FindKnativeModules(ctx, s.opts.Root)
	if err != nil {
		return err
	}
	return s.StartKnativeWebhook(ctx, s.bridge, netnsWebhook, s.opts.Tools.ServingDir, mods)
}

func (s *Stack) startKnativeController(ctx context.Context) error {
	return s.StartKnativeController(ctx, s.bridge, netnsController, s.opts.Tools.ServingDir)
}

// startDataPlane runs the data plane: requestsim's requests, real
// queue-proxies for the pods of analysed Services (see queueProxies), and
// the stand-in for every other pod's queue-proxy stats. It all lives in a
// network namespace of its own where PodCIDR is local, so one listener
// answers the autoscaler's scrape of any stand-in pod's IP, while each
// real queue-proxy's pod IP is routed on to that queue-proxy's namespace.
func (s *Stack) startDataPlane(ctx context.Context) error {
	name, _, err := s.bridge.Namespace(ctx, netnsDataPlane)
	if err != nil {
		return err
	}
	if err := s.bridge.In(ctx, name, "route", "add", "local", PodCIDR, "dev", "lo"); err != nil {
		return err
	}
	// /proc/sys/net is the namespace's own for a process in it.
	fwd := append(Exec(name), "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	if out, err := exec.CommandContext(ctx, fwd[0], fwd[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("let the data plane's namespace route to pods: %w: %s", err, out)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: s.bridge.DialContext(name), MaxIdleConnsPerHost: 64}}
	sim := requestsim.New(s.Serving, Namespace, RequestRate, client, s.opts.Log)
	stats := &requestsim.Stats{Sim: sim, Kube: s.Kube(), Namespace: Namespace}
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sim.Run(loopCtx, 200*time.Millisecond)
	}()
	stats.Run(loopCtx)
	s.queueProxies = newQueueProxies(s, name, sim)
	qpDone := s.queueProxies.run(loopCtx, s)
	statsLn, err := s.bridge.Listen(name, ":9090")
	if err != nil {
		cancel()
		return fmt.Errorf("listen for the autoscaler's scrapes: %w", err)
	}
	statsSrv := &http.Server{Handler: stats, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = statsSrv.Serve(statsLn) }()
	routerSrv, err := s.startRouter(sim, client)
	if err != nil {
		cancel()
		_ = statsSrv.Close()
		return err
	}
	s.sim, s.stats = sim, stats
	s.background = append(s.background, func() {
		cancel()
		<-done
		<-qpDone
		_ = statsSrv.Close()
		_ = routerSrv.Close()
	})
	return nil
}

// startRouter serves the ingress's data path (ingress.Router) on the
// host's loopback, at RouterURL: a test's request reaches the pods' real
// queue-proxies through the data plane, routed as Knative's KIngress says.
func (s *Stack) startRouter(sim *requestsim.Sim, client *http.Client) (*http.Server, error) {
	nc, err := netclient.NewForConfig(s.Rest)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the ingress's requests: %w", err)
	}
	srv := &http.Server{Handler: &ingress.Router{Client: nc, Namespace: Namespace, Targets: sim.Targets, HTTP: client}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.RouterURL = "http://" + ln.Addr().String()
	return srv, nil
}

func (s *Stack) startKnativeAutoscaler(ctx context.Context) error {
	return s.StartKnativeAutoscaler(ctx, s.bridge, netnsAutoscaler, s.opts.Tools.ServingDir, s.bridge.Addr(netnsDataPlane))
}

// startIngress runs the networking layer's stand-in (test/ingress), and
// the readiness watch behind Options.OnReady.
func (s *Stack) startIngress(ctx context.Context) error {
	nc, err := netclient.NewForConfig(s.Rest)
	if err != nil {
		return err
	}
	s.Ingress = &ingress.Controller{Client: nc, Class: IngressClass, Log: s.opts.Log}
	loopCtx, cancel := context.WithCancel(context.Background())
	done, err := s.Ingress.Run(loopCtx, 4)
	if err != nil {
		cancel()
		return err
	}
	s.background = append(s.background, func() { cancel(); <-done })
	if s.opts.OnReady != nil {
		return s.watchReady(loopCtx)
	}
	return nil
}

// watchReady tells Options.OnReady when each Revision is first seen Ready
// (by Knative's controller, from its pods), through an informer.
func (s *Stack) watchReady(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.Serving, 0, informers.WithNamespace(Namespace))
	inf := factory.Serving().V1().Revisions().Informer()
	seen := map[string]bool{}
	check := func(obj any) {
		rev, ok := obj.(*servingv1.Revision)
		if !ok || seen[rev.Name] || !rev.IsReady() {
			return
		}
		// Informer handlers run one at a time: seen needs no lock.
		seen[rev.Name] = true
		s.opts.OnReady(rev.Name, time.Now())
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: check, UpdateFunc: func(_, obj any) { check(obj) }}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return nil
}

// startServingStandIn runs test/servingstandin in place of Knative Serving
// (Options.ServingStandIn); it tells Options.OnReady itself.
func (s *Stack) startServingStandIn(ctx context.Context) error {
	// A client of its own, with room to spare: at thousands of Services the
	// stand-in writes several objects for each of sluice's writes, and it
	// must never be what the fleet run measures (with the stack's shared
	// client, 200 requests a second, its queue made verifications time out).
	cfg := rest.CopyConfig(s.Rest)
	cfg.QPS, cfg.Burst = 5000, 10000
	client, err := servingclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c := &servingstandin.Controller{Client: client, Namespace: Namespace, OnReady: s.opts.OnReady, Log: s.opts.Log}
	loopCtx, cancel := context.WithCancel(context.Background())
	done, err := c.Run(loopCtx, 128)
	if err != nil {
		cancel()
		return err
	}
	s.background = append(s.background, func() { cancel(); <-done })
	return nil
}
