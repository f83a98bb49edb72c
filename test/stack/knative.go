package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// KnativeModules are the module directories Knative's YAML comes from, as
// the tools module that builds Knative Serving requires them.
type KnativeModules struct{ Serving, Networking, Caching string }

// FindKnativeModules locates them from the repository root.
func FindKnativeModules(ctx context.Context, root string) (KnativeModules, error) {
	dir := filepath.Join(root, "test", "tools", "serving")
	var m KnativeModules
	var err error
	for _, f := range []struct {
		module string
		into   *string
	}{{"knative.dev/serving", &m.Serving}, {"knative.dev/networking", &m.Networking}, {"knative.dev/caching", &m.Caching}} {
		if *f.into, err = moduleDir(ctx, dir, f.module); err != nil {
			return m, err
		}
	}
	return m, nil
}

// StartKnativeWebhook installs what Knative Serving's admission webhook needs
// — the rest of Knative's CRDs (networking's, caching's Image), its
// ConfigMaps and webhook configurations, all unmodified — and runs the
// webhook, built unmodified, in network namespace n of bridge. The API
// server reaches it through a selector-less Service with a hand-written
// EndpointSlice, as a Deployment's pod would give it in a cluster; it must
// serve on the bridge with aggregator routing (Options.APIServerAddress,
// Options.AggregatorRouting). It returns once the webhook answers the API
// server: a dry-run Service whose traffic sums to 90 is refused.
func (s *Stack) StartKnativeWebhook(ctx context.Context, bridge *Bridge, n int, servingDir string, mods KnativeModules) error {
	kubectl := func(args ...string) error { _, err := s.Kubectl(ctx, args...); return err }
	nw := filepath.Join(mods.Networking, "config")
	steps := [][]string{
		{"create", "namespace", "knative-serving"},
		{"apply", "--server-side", "-f", filepath.Join(nw, "certificate.yaml"), "-f", filepath.Join(nw, "domain-claim.yaml"),
			"-f", filepath.Join(nw, "ingress.yaml"), "-f", filepath.Join(nw, "serverlessservice.yaml"),
			"-f", filepath.Join(mods.Caching, "config", "image.yaml")},
		{"apply", "-f", filepath.Join(mods.Serving, "config", "core", "configmaps"), "-f", filepath.Join(nw, "config-network.yaml")},
		{"apply", "-f", filepath.Join(mods.Serving, "config", "core", "webhooks")},
	}
	for _, st := range steps {
		if err := kubectl(st...); err != nil {
			return err
		}
	}
	if s.controllerManager == nil {
		// Knative's validation dry-runs a Pod as the namespace's default
		// ServiceAccount, which kube-controller-manager makes where it runs.
		if err := kubectl("create", "serviceaccount", "default", "-n", Namespace); err != nil {
			return err
		}
	}
	if err := s.configureKnative(ctx); err != nil {
		return err
	}
	name, addr, err := bridge.Namespace(ctx, n)
	if err != nil {
		return err
	}
	endpoints := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"webhook","namespace":"knative-serving"},
"spec":{"ports":[{"name":"https-webhook","port":443,"targetPort":8443}]}}
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"webhook-stack","namespace":"knative-serving",
"labels":{"kubernetes.io/service-name":"webhook"}},"addressType":"IPv4","ports":[{"name":"https-webhook","port":8443,"protocol":"TCP"}],
"endpoints":[{"addresses":["%s"],"conditions":{"ready":true}}]}`, addr)
	path := filepath.Join(s.opts.Dir, "knative-webhook-endpoints.json")
	if err := os.WriteFile(path, []byte(endpoints), 0o600); err != nil {
		return err
	}
	if err := kubectl("apply", "-f", path); err != nil {
		return err
	}
	env := knativeEnv("webhook-stack", "WEBHOOK_NAME=webhook", "WEBHOOK_PORT=8443")
	args := append(Exec(name), filepath.Join(servingDir, "webhook"), "--kubeconfig", s.Kubeconfig)
	s.restartWebhook = func(ctx context.Context) error {
		s.knativeWebhook, err = s.run(ctx, "knative-webhook", env, s.knativeWebhookAnswers(ctx), args[0], args[1:]...)
		return err
	}
	return s.restartWebhook(ctx)
}

// KillKnativeWebhook kills Knative's webhook with SIGKILL: every write of a
// Knative object then fails ("failed calling webhook") until
// RestartKnativeWebhook.
func (s *Stack) KillKnativeWebhook() { s.knativeWebhook.kill() }

// RestartKnativeWebhook starts Knative's webhook again, and returns once it answers.
func (s *Stack) RestartKnativeWebhook(ctx context.Context) error { return s.restartWebhook(ctx) }

// knativeWebhookAnswers passes once the API server calls Knative's webhook:
// a dry-run Service whose traffic sums to 90 is refused.
func (s *Stack) knativeWebhookAnswers(ctx context.Context) func() error {
	return func() error {
		svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "webhook-ready-check"}}
		svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "dev.local/sluice/check:v1"}}
		p := int64(90)
		svc.Spec.Traffic = []servingv1.TrafficTarget{{RevisionName: "check-00001", Percent: &p}}
		_, err := s.Serving.ServingV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return fmt.Errorf("the API server does not call Knative's webhook yet")
		case !strings.Contains(err.Error(), "denied the request"):
			return err
		}
		return nil
	}
}

// StartKnativeController runs Knative Serving's own controller, built
// unmodified, in network namespace n of bridge (its probe port, 8080, is
// hard-coded). StartKnativeWebhook must have run: the controller reads the
// same ConfigMaps (see knativeConfig). It returns once its Service
// reconciler holds its leader lease.
func (s *Stack) StartKnativeController(ctx context.Context, bridge *Bridge, n int, servingDir string) error {
	name, _, err := bridge.Namespace(ctx, n)
	if err != nil {
		return err
	}
	env := knativeEnv("controller-stack")
	args := append(Exec(name), filepath.Join(servingDir, "controller"), "--kubeconfig", s.Kubeconfig)
	kube := s.Kube()
	return s.Run(ctx, "knative-controller", env, func() error {
		leases, err := kube.CoordinationV1().Leases("knative-serving").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		// Knative names the holder after the host, not POD_NAME: look for
		// the Service reconciler's lease being held.
		var names []string
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, "controller.knative.dev.serving.pkg.reconciler.service.") && l.Spec.HolderIdentity != nil {
				return nil
			}
			names = append(names, l.Name)
		}
		return fmt.Errorf("the Service reconciler holds no lease yet (leases: %s)", strings.Join(names, ", "))
	}, args[0], args[1:]...)
}

// knativeEnv is the environment Knative's components run with: what their
// Deployments give them in a cluster, plus Knative's own knobs for many
// objects at once (its client's rate limit, and workers per reconciler),
// raised as a cluster running hundreds of Services raises them: at the
// defaults (5 requests a second per reconciler, 2 workers) Knative's
// controller makes about three Revisions a second, and the benchmark's
// hundreds of Services queue.
func knativeEnv(pod string, extra ...string) []string {
	return append([]string{"SYSTEM_NAMESPACE=knative-serving", "CONFIG_LOGGING_NAME=config-logging",
		"CONFIG_OBSERVABILITY_NAME=config-observability", "POD_NAME=" + pod,
		"KUBE_API_QPS=200", "KUBE_API_BURST=400", "K_THREADS_PER_CONTROLLER=4"}, extra...)
}

// IngressClass is config-network's ingress-class on the stack: the KIngress
// objects Knative makes carry it, and test/ingress answers for them.
const IngressClass = "ingress.sluice.dev"

// knativeConfig are the keys the stack changes in Knative's own
// ConfigMaps; everything else is as Knative ships it.
var knativeConfig = []struct{ configMap, patch string }{
	// queue-sidecar-image is required. A dev.local name is never resolved
	// against a registry; nor is any example.com image, which the tests use.
	{"config-deployment", fmt.Sprintf(`{"data":{"queue-sidecar-image":"dev.local/knative/queue:v0.50.0",
"registries-skipping-tag-resolving":"kind.local,ko.local,dev.local,example.com","progress-deadline":"%s"}}`, ProgressDeadline)},
	// No activator in the path, and no scale to zero: nothing here could
	// wake a Revision again.
	{"config-autoscaler", `{"data":{"target-burst-capacity":"0","enable-scale-to-zero":"false"}}`},
	{"config-network", fmt.Sprintf(`{"data":{"ingress-class":%q}}`, IngressClass)},
	// Queue-proxies export request metrics only when told to; on 9091,
	// their http-usermetric port, for Prometheus to scrape.
	{"config-observability", `{"data":{"request-metrics-protocol":"prometheus"}}`},
	// A request with the Knative-Serving-Tag header reaches its tag's
	// Revision (sluice.dev/preview's header, routed by ingress.Router).
	{"config-features", `{"data":{"tag-header-based-routing":"enabled"}}`},
}

func (s *Stack) configureKnative(ctx context.Context) error {
	for _, c := range knativeConfig {
		if _, err := s.Kubectl(ctx, "-n", "knative-serving", "patch", "configmap", c.configMap, "--type", "merge", "-p", c.patch); err != nil {
			return err
		}
	}
	return nil
}

// StartKnativeAutoscaler runs Knative Serving's own autoscaler, built
// unmodified, in network namespace n of bridge, with that namespace's
// address as POD_IP (it publishes it in the autoscaler-bucket Endpoints).
// It scrapes every pod's queue-proxy stats at the pod's IP: the namespace
// routes PodCIDR to dataPlane, the address of the namespace in which the
// data plane's stand-in answers for every pod. The activator is not run
// (target-burst-capacity 0 keeps it out of the path); the ServerlessService
// reconciler only needs its Endpoints to exist, so they are written by hand.
// It returns once the autoscaler holds its bucket's lease.
func (s *Stack) StartKnativeAutoscaler(ctx context.Context, bridge *Bridge, n int, servingDir, dataPlane string) error {
	name, addr, err := bridge.Namespace(ctx, n)
	if err != nil {
		return err
	}
	if err := bridge.In(ctx, name, "route", "add", PodCIDR, "via", dataPlane); err != nil {
		return err
	}
	activator := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"activator-service","namespace":"knative-serving"},
"spec":{"ports":[{"name":"http","port":80,"targetPort":8012}]}}
{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"activator-service","namespace":"knative-serving"},
"subsets":[{"addresses":[{"ip":"%s"}],"ports":[{"name":"http","port":8012}]}]}`, bridge.Host)
	path := filepath.Join(s.opts.Dir, "activator-endpoints.json")
	if err := os.WriteFile(path, []byte(activator), 0o600); err != nil {
		return err
	}
	if _, err := s.Kubectl(ctx, "apply", "-f", path); err != nil {
		return err
	}
	env := knativeEnv("autoscaler-stack", "POD_IP="+addr)
	args := append(Exec(name), filepath.Join(servingDir, "autoscaler"), "--kubeconfig", s.Kubeconfig)
	kube := s.Kube()
	return s.Run(ctx, "knative-autoscaler", env, func() error {
		l, err := kube.CoordinationV1().Leases("knative-serving").Get(ctx, "autoscaler-bucket-00-of-01", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity != nil && strings.HasSuffix(*l.Spec.HolderIdentity, "_"+addr) {
			return nil
		}
		return fmt.Errorf("the autoscaler has not published its address in its bucket yet")
	}, args[0], args[1:]...)
}
