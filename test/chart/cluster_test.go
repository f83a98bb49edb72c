package chart

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
)

// startAPIServer runs etcd and a real kube-apiserver with Knative Serving's
// and Eventing's CRDs: what the chart's objects are checked against. No
// controller runs, so pods never start; the images are never pulled.
func startAPIServer(t *testing.T) *stack.Stack {
	t.Helper()
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := repoRoot(t)
	crds, err := stack.KnativeCRDDirs(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := stack.Start(ctx, stack.Options{
		Dir: dir, Tools: tools, Root: root, CRDDirs: crds, ControlPlaneOnly: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func kubectl(t *testing.T, s *stack.Stack, args ...string) string {
	t.Helper()
	return testkit.Kubectl(t, s.Kubectl, args...)
}

// TestChartOnAPIServer: the chart's objects, with its defaults and with every
// option on, pass a server-side dry run on a real API server; then a real
// `helm install`, an upgrade that turns the webhooks off and changes a
// setting, one that turns them on again, and `helm uninstall`, which leaves
// only what docs/install.md names.
func TestChartOnAPIServer(t *testing.T) {
	helmBin(t)
	s := startAPIServer(t)
	kubeconfig := []string{"--kubeconfig", s.Kubeconfig}
	kubectl(t, s, "create", "namespace", namespace)

	// A dry run of everything the chart can render. The ServiceMonitor
	// needs the Prometheus Operator's CRD, which is not here: it is checked
	// rendered (TestChartOptions), not applied.
	full := []string{"--values", filepath.Join("testdata", "full.yaml")}
	for _, values := range [][]string{nil, full, append(full, "--set", "controller.enabled=true")} {
		args := append([]string{"template", "sluice", chartDir(t), "--namespace", namespace, "--set", "serviceMonitor.enabled=false"}, values...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "rendered.yaml")
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		got := kubectl(t, s, "apply", "--server-side", "--dry-run=server", "--field-manager", "chart-test", "-f", f)
		if n := strings.Count(got, "serverside-applied (server dry run)"); n != len(parse(t, "rendered", []byte(out))) {
			t.Errorf("values %q: %d objects applied in the dry run, want every one rendered:\n%s", values, n, got)
		}
	}
	// Install, as docs/install.md does (--create-namespace is a no-op for
	// the namespace the dry run needed; no controller here could delete it).
	if _, err := helm(t, append([]string{"install", "sluice", chartDir(t), "--namespace", namespace, "--create-namespace",
		"--set", "temporal.address=temporal-frontend.temporal:7233,temporal.namespace=rollouts"}, kubeconfig...)...); err != nil {
		t.Fatal(err)
	}
	installed := render(t, "--set", "temporal.namespace=rollouts")
	for _, o := range installed {
		kubectl(t, s, "get", strings.ToLower(o.GetKind())+"."+group(o.GetAPIVersion()), o.GetName(), "-n", namespaceOf(o))
	}
	checksum := func() string {
		return kubectl(t, s, "get", "deployment", "sluice-worker", "-n", namespace, "-o", `jsonpath={.spec.template.metadata.annotations.checksum/config}`)
	}
	before := checksum()
	// What the receiver makes when it starts (its admission certificates):
	// no pod runs here, so the test makes it as the receiver would.
	kubectl(t, s, "create", "secret", "generic", "sluice-admission-certs", "-n", namespace, "--from-literal=ca.crt=x")

	// Upgrade: the webhooks off, a new hold, three workers.
	if _, err := helm(t, append([]string{"upgrade", "sluice", chartDir(t), "--namespace", namespace, "--reuse-values",
		"--set", "admissionWebhooks.enabled=false,defaults.hold=5m,worker.replicas=3"}, kubeconfig...)...); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"mutatingwebhookconfiguration/sluice-pin-latest", "validatingwebhookconfiguration/sluice-policy", "clusterrole/sluice-receiver-admission"} {
		waitGone(t, s, gone)
	}
	if got := kubectl(t, s, "get", "deployment", "sluice-worker", "-n", namespace, "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Errorf("after the upgrade the worker has %s replicas, want 3", got)
	}
	if got := kubectl(t, s, "get", "configmap", "sluice-defaults", "-n", namespace, "-o", "jsonpath={.data.SLUICE_DEFAULT_HOLD}"); got != "5m" {
		t.Errorf("after the upgrade SLUICE_DEFAULT_HOLD is %q, want 5m", got)
	}
	if after := checksum(); after == before || after == "" {
		t.Errorf("a changed setting left the worker's pod template as it was (checksum %q → %q): its pods would keep the old one", before, after)
	}
	if _, err := helm(t, append([]string{"upgrade", "sluice", chartDir(t), "--namespace", namespace, "--reuse-values",
		"--set", "admissionWebhooks.enabled=true"}, kubeconfig...)...); err != nil {
		t.Fatal(err)
	}
	kubectl(t, s, "get", "mutatingwebhookconfiguration", "sluice-pin-latest")

	// To one process and back: the receiver's Deployment goes and comes
	// again, the worker's pods run the controller and then the worker.
	args := func() string {
		return kubectl(t, s, "get", "deployment", "sluice-worker", "-n", namespace, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	}
	if _, err := helm(t, append([]string{"upgrade", "sluice", chartDir(t), "--namespace", namespace, "--reuse-values",
		"--set", "controller.enabled=true"}, kubeconfig...)...); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, "deployment.apps/sluice-receiver", "-n", namespace)
	if got := args(); got != `["controller"]` {
		t.Errorf("with controller.enabled the worker's pods run %s, want [\"controller\"]", got)
	}
	if _, err := helm(t, append([]string{"upgrade", "sluice", chartDir(t), "--namespace", namespace, "--reuse-values",
		"--set", "controller.enabled=false"}, kubeconfig...)...); err != nil {
		t.Fatal(err)
	}
	kubectl(t, s, "get", "deployment", "sluice-receiver", "-n", namespace)
	if got := args(); got != `["worker"]` {
		t.Errorf("with controller.enabled back off the worker's pods run %s, want [\"worker\"]", got)
	}

	// Uninstall: what is left is what docs/install.md's "Uninstalling" names.
	// Helm 4's default waiter (kstatus) now and then misses a deletion and
	// waits out its whole timeout (helm/helm#31766); the legacy waiter
	// polls each object until it is gone. --timeout keeps Helm's own report
	// of what is still there inside this test's time limit.
	if _, err := helm(t, append([]string{"uninstall", "sluice", "--namespace", namespace, "--wait=legacy", "--timeout=2m"}, kubeconfig...)...); err != nil {
		t.Fatal(err)
	}
	left := leftovers(t, s)
	want := []string{"namespace/" + namespace, namespace + "/secret/sluice-admission-certs"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("after helm uninstall these are left: %v; want exactly %v", left, want)
	}
	doc := uninstallSection(t)
	for _, name := range []string{namespace, "sluice-admission-certs"} {
		if !strings.Contains(doc, name) {
			t.Errorf("helm uninstall leaves %s, which docs/install.md's Uninstalling does not name", name)
		}
	}
}

func group(apiVersion string) string {
	if i := strings.Index(apiVersion, "/"); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

func namespaceOf(o interface{ GetNamespace() string }) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns
	}
	return "default"
}

func waitGone(t *testing.T, s *stack.Stack, what string, flags ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := s.Kubectl(ctx, append([]string{"get", what, "--ignore-not-found", "-o", "name"}, flags...)...)
		cancel()
		if err == nil && strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there after a minute: %s %v", what, out, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// leftovers lists every object in the release's namespace, of every kind
// the API server lists, and every cluster-scoped object whose name or labels
// say sluice; the namespace itself is listed if it exists.
func leftovers(t *testing.T, s *stack.Stack) []string {
	t.Helper()
	var left []string
	if out := kubectl(t, s, "get", "namespace", namespace, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
		left = append(left, "namespace/"+namespace)
	}
	var kinds []string
	for _, k := range strings.Fields(kubectl(t, s, "api-resources", "--verbs=list", "--namespaced=true", "-o", "name")) {
		// Endpoints are deprecated (kubectl warns on every list) and only
		// ever made by a controller from a Service, as EndpointSlices are.
		if k != "endpoints" {
			kinds = append(kinds, k)
		}
	}
	out := kubectl(t, s, "get", strings.Join(kinds, ","), "-n", namespace, "--ignore-not-found", "-o", "name")
	for _, o := range strings.Fields(out) {
		// The API server's own: the namespace's CA bundle and default
		// account appear in every namespace (made by controllers that do
		// not run here, but listed in case).
		if o == "configmap/kube-root-ca.crt" || o == "serviceaccount/default" {
			continue
		}
		left = append(left, namespace+"/"+shortKind(o))
	}
	cluster := strings.Fields(kubectl(t, s, "api-resources", "--verbs=list", "--namespaced=false", "-o", "name"))
	out = kubectl(t, s, "get", strings.Join(cluster, ","), "-o", "name")
	sluiceName := regexp.MustCompile(`/sluice`)
	for _, o := range strings.Fields(out) {
		if sluiceName.MatchString(o) && !strings.HasPrefix(o, "namespace/") && !strings.Contains(o, "customresourcedefinition") {
			left = append(left, o)
		}
	}
	sort.Strings(left)
	return left
}

// shortKind turns kubectl's "secret/x" or "rolebinding.rbac.authorization.k8s.io/x"
// into kind/name.
func shortKind(o string) string {
	kind, name, _ := strings.Cut(o, "/")
	kind, _, _ = strings.Cut(kind, ".")
	return kind + "/" + name
}

func uninstallSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Uninstalling")
	if !ok {
		t.Fatal("docs/install.md has no Uninstalling section")
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}
