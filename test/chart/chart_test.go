// Package chart tests sluice's Helm chart (charts/sluice) with Helm v4
// itself: lint, the values schema, the rendered objects against
// config/deploy, and on a real API server a dry run, an install, an upgrade
// and an uninstall.
package chart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/test/stack"
)

// namespace is where docs/install.md installs the chart, as config/deploy.
const namespace = "sluice-system"

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "charts", "sluice") }

// helmBin is the Helm that test/tools/install.sh builds.
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLUICE_HELM_BIN")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("SLUICE_HELM_BIN is not set: run the tests with `make test`, which builds Helm")
		}
		t.Skip("SLUICE_HELM_BIN is not set; `make test` builds Helm and sets it")
	}
	return bin
}

// helm runs Helm with its own empty configuration and cache, so nothing
// of this machine's (repositories, plugins) changes what it does.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// render is `helm template` of the chart, as objects.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, append([]string{"template", "sluice", chartDir(t), "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, "helm template", []byte(out))
}

func parse(t *testing.T, what string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// deployObjects are config/deploy's manifests, the other way to install.
func deployObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "deploy", "[0-9]*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("config/deploy: %v (%d files)", err, len(files))
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, parse(t, f, b)...)
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	k := o.GetKind() + "/" + o.GetName()
	if ns := o.GetNamespace(); ns != "" {
		k = ns + "/" + k
	}
	return k
}

func keys(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, key(o))
	}
	sort.Strings(ks)
	return ks
}

// TestChartLint: helm lint --strict passes with the defaults and with every
// option on.
func TestChartLint(t *testing.T) {
	for _, values := range []string{"", filepath.Join("testdata", "full.yaml")} {
		args := []string{"lint", "--strict", chartDir(t)}
		if values != "" {
			args = append(args, "--values", values)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Errorf("values %q: %v", values, err)
			continue
		}
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("values %q: helm lint printed\n%s", values, out)
		}
	}
}

// TestChartRefusesMistakes: a misspelt or malformed value is refused with a
// message naming it, as a policy typo is (the values schema); nothing is
// rendered from it.
func TestChartRefusesMistakes(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"worker.replica=3", "additional properties 'replica' not allowed"},
		{"admissionWebhook.enabled=false", "additional properties 'admissionWebhook' not allowed"},
		{"temporal.address=temporal-frontend", "/temporal/address"},
		{"image.digest=latest", "/image/digest"},
		{"prometheus.knativeMetrics=prom", "/prometheus/knativeMetrics"},
		{"defaults.hold=ten minutes", "/defaults/hold"},
		{"cluster=EU_West", "/cluster"},
		{"worker.env.lower=1", "/worker/env"},
	} {
		out, err := helm(t, "template", "sluice", chartDir(t), "--set", c.set)
		if err == nil {
			t.Errorf("--set %s: rendered, want a refusal", c.set)
			continue
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("--set %s: the refusal does not say %q:\n%s", c.set, c.want, out)
		}
	}
}

// TestChartVersionFollowsVersionFile: Chart.yaml's version and appVersion are
// the VERSION file's (make release sets both when it packages the chart).
func TestChartVersionFollowsVersionFile(t *testing.T) {
	root := repoRoot(t)
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(v))
	if chart.AppVersion != want || "v"+chart.Version != want {
		t.Errorf("Chart.yaml has version %q and appVersion %q; VERSION is %q (want %q and %q)",
			chart.Version, chart.AppVersion, want, strings.TrimPrefix(want, "v"), want)
	}
}

// TestChartMatchesDeploy: with its defaults the chart renders what
// config/deploy holds, object for object (but the Namespace, which Helm's
// --create-namespace makes), and each the same but for what a chart adds:
// its labels, the image reference, the rolling update's surge and the
// checksum that rolls pods on a changed setting. So the RBAC is exactly
// config/deploy's — which the e2e suite runs every scenario with.
func TestChartMatchesDeploy(t *testing.T) {
	chart := map[string]*unstructured.Unstructured{}
	for _, o := range render(t) {
		chart[key(o)] = o
	}
	var deployKeys []string
	for _, d := range deployObjects(t) {
		if d.GetKind() == "Namespace" {
			continue
		}
		deployKeys = append(deployKeys, key(d))
		c, ok := chart[key(d)]
		if !ok {
			t.Errorf("config/deploy has %s; the chart does not render it", key(d))
			continue
		}
		for k, v := range d.GetLabels() {
			if c.GetLabels()[k] != v {
				t.Errorf("%s: the chart's labels %v lack config/deploy's %s=%s", key(d), c.GetLabels(), k, v)
			}
		}
		if diff := cmp.Diff(comparable(t, d), comparable(t, c)); diff != "" {
			t.Errorf("%s differs between config/deploy (-) and the chart (+):\n%s", key(d), diff)
		}
	}
	sort.Strings(deployKeys)
	var chartKeys []string
	for k := range chart {
		chartKeys = append(chartKeys, k)
	}
	sort.Strings(chartKeys)
	if diff := cmp.Diff(deployKeys, chartKeys); diff != "" {
		t.Errorf("objects of config/deploy (-) and of the chart with its defaults (+):\n%s", diff)
	}
}

// comparable drops what the chart may add to an object of config/deploy.
func comparable(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	c := o.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "labels")
	unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
	if c.GetKind() != "Deployment" {
		return c.Object
	}
	unstructured.RemoveNestedField(c.Object, "spec", "strategy")
	unstructured.RemoveNestedField(c.Object, "spec", "template", "metadata", "annotations")
	containers, _, err := unstructured.NestedSlice(c.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range containers {
		m := ct.(map[string]any)
		delete(m, "image")
		delete(m, "imagePullPolicy")
		// config/deploy reads an optional API key from a fixed Secret, the
		// chart from the Secret temporal.apiKeySecret names; the chart also
		// spells out the admission Secret for its release's namespace
		// (config/deploy's is the receiver's default).
		var env []any
		for _, e := range asSlice(m["env"]) {
			switch e.(map[string]any)["name"] {
			case "TEMPORAL_API_KEY", "SLUICE_ADMISSION_SECRET":
				continue
			}
			env = append(env, e)
		}
		m["env"] = env
	}
	if err := unstructured.SetNestedSlice(c.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	return c.Object
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestChartOptions: every option lands where the worker and receiver read
// it, and turning a part off removes its objects and its rights.
func TestChartOptions(t *testing.T) {
	objs := render(t, "--values", filepath.Join("testdata", "full.yaml"))
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKey[key(o)] = o
		if o.GetLabels()["team"] != "platform" {
			t.Errorf("%s lacks the extra label team=platform: %v", key(o), o.GetLabels())
		}
	}
	worker := byKey[namespace+"/Deployment/sluice-worker"]
	receiver := byKey[namespace+"/Deployment/sluice-receiver"]
	if worker == nil || receiver == nil {
		t.Fatalf("no worker or receiver Deployment in %v", keys(objs))
	}
	if n, _, _ := unstructured.NestedFieldNoCopy(worker.Object, "spec", "replicas"); fmt.Sprint(n) != "3" {
		t.Errorf("worker replicas %v, want 3", n)
	}
	wantEnv := map[string]string{
		"SLUICE_CLUSTER": "eu-west-1", "TEMPORAL_TLS": "true", "TEMPORAL_TLS_SERVER_NAME": "rollouts.a1b2c.tmprl.cloud",
		"TEMPORAL_TLS_CLIENT_CERT_PATH": "/etc/sluice/temporal-client/tls.crt", "TEMPORAL_TLS_CLIENT_KEY_PATH": "/etc/sluice/temporal-client/tls.key",
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/etc/sluice/temporal-ca/ca.crt", "TEMPORAL_API_KEY": "secret temporal-cloud",
	}
	for name, d := range map[string]*unstructured.Unstructured{"worker": worker, "receiver": receiver} {
		env := containerEnv(t, d)
		for k, v := range wantEnv {
			if env[k] != v {
				t.Errorf("%s: %s=%q, want %q", name, k, env[k], v)
			}
		}
		if img := container(t, d)["image"]; img != "registry.example.com/platform/sluice@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
			t.Errorf("%s: image %v, want the repository at the digest", name, img)
		}
		mounts := fmt.Sprint(container(t, d)["volumeMounts"])
		for _, m := range []string{"/etc/sluice/temporal-client", "/etc/sluice/temporal-ca"} {
			if !strings.Contains(mounts, m) {
				t.Errorf("%s: no volume mounted at %s: %s", name, m, mounts)
			}
		}
		if labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels"); labels["sidecar.istio.io/inject"] != "false" {
			t.Errorf("%s: pod labels %v lack podLabels", name, labels)
		}
	}
	if env := containerEnv(t, worker); env["SLUICE_MAX_ACTIVITIES"] != "200" || env["SLUICE_KUBE_QPS"] != "50" {
		t.Errorf("worker env lacks worker.env: %v", env)
	}
	renv := containerEnv(t, receiver)
	for k, v := range map[string]string{
		"SLUICE_RECEIVER_TOKENS_FILE": "/etc/sluice/receiver-tokens/tokens", "SLUICE_RECEIVER_OIDC_ISSUER": "https://kubernetes.default.svc",
		"SLUICE_RECEIVER_OIDC_AUDIENCE": "sluice", "SLUICE_RECEIVER_SWEEP": "1m",
	} {
		if renv[k] != v {
			t.Errorf("receiver: %s=%q, want %q", k, renv[k], v)
		}
	}
	defaults, _, _ := unstructured.NestedStringMap(byKey[namespace+"/ConfigMap/sluice-defaults"].Object, "data")
	for k, v := range map[string]string{"SLUICE_DEFAULT_STEPS": "5,20,50,100", "SLUICE_DEFAULT_HOLD": "5m", "SLUICE_PROMETHEUS_URL": "http://prometheus-operated.monitoring:9090", "SLUICE_KNATIVE_METRICS": "opencensus"} {
		if defaults[k] != v {
			t.Errorf("sluice-defaults: %s=%q, want %q", k, defaults[k], v)
		}
	}
	sm := byKey[namespace+"/ServiceMonitor/sluice"]
	if sm == nil || byKey[namespace+"/Service/sluice-worker-metrics"] == nil {
		t.Errorf("serviceMonitor.enabled renders no ServiceMonitor and worker metrics Service: %v", keys(objs))
	} else if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.GetLabels())
	}

	// Off: the parts go, with their rights.
	off := render(t, "--set", "admissionWebhooks.enabled=false,apiServerSource.enabled=false,progressEvents.enabled=false")
	for _, k := range keys(off) {
		for _, gone := range []string{"sluice-pin-latest", "sluice-policy", "sluice-receiver-admission", "sluice-apiserversource", "ApiServerSource", "SinkBinding"} {
			if strings.Contains(k, gone) {
				t.Errorf("with the webhooks, the ApiServerSource and progress events off, the chart still renders %s", k)
			}
		}
	}
	for _, o := range off {
		if o.GetKind() == "Deployment" && o.GetName() == "sluice-receiver" {
			if env := containerEnv(t, o); env["SLUICE_ADMISSION_ADDR"] != "" {
				t.Errorf("with the webhooks off, the receiver still serves them: %v", env)
			}
		}
	}
}

func container(t *testing.T, d *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil || len(cs) != 1 {
		t.Fatalf("%s: containers %v (%v)", key(d), cs, err)
	}
	return cs[0].(map[string]any)
}

// containerEnv reads a container's environment; a value from a Secret reads
// "secret NAME".
func containerEnv(t *testing.T, d *unstructured.Unstructured) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range asSlice(container(t, d)["env"]) {
		m := e.(map[string]any)
		name, _ := m["name"].(string)
		if v, ok := m["value"].(string); ok {
			env[name] = v
		} else if s, found, _ := unstructured.NestedString(m, "valueFrom", "secretKeyRef", "name"); found {
			env[name] = "secret " + s
		}
	}
	return env
}

// controller.enabled: the worker's pods run `sluice controller` with the
// receiver's settings, ports and tokens as well; no receiver Deployment is
// left; the receiver's Service sends events to the worker's pods, on a port
// the ServiceMonitor does not scrape a second time; and the worker's account
// holds the receiver's rights.
func TestChartControllerMode(t *testing.T) {
	objs := render(t, "--values", filepath.Join("testdata", "full.yaml"), "--set", "controller.enabled=true")
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKey[key(o)] = o
	}
	if d := byKey[namespace+"/Deployment/sluice-receiver"]; d != nil {
		t.Errorf("controller.enabled still renders the receiver's Deployment")
	}
	worker := byKey[namespace+"/Deployment/sluice-worker"]
	if worker == nil {
		t.Fatalf("no worker Deployment in %v", keys(objs))
	}
	c := container(t, worker)
	if fmt.Sprint(c["args"]) != "[controller]" {
		t.Errorf("the worker's pods run %v, want [controller]", c["args"])
	}
	env := containerEnv(t, worker)
	for k, v := range map[string]string{
		"SLUICE_HTTP_ADDR": ":9090", "SLUICE_RECEIVER_ADDR": ":8081", "SLUICE_ADMISSION_ADDR": ":8443",
		"SLUICE_RECEIVER_TOKENS_FILE": "/etc/sluice/receiver-tokens/tokens", "SLUICE_RECEIVER_OIDC_ISSUER": "https://kubernetes.default.svc",
		"SLUICE_RECEIVER_SWEEP": "1m", "SLUICE_MAX_ACTIVITIES": "200", "SLUICE_CLUSTER": "eu-west-1",
	} {
		if env[k] != v {
			t.Errorf("controller: %s=%q, want %q", k, env[k], v)
		}
	}
	if mounts := fmt.Sprint(c["volumeMounts"]); !strings.Contains(mounts, "/etc/sluice/receiver-tokens") || !strings.Contains(mounts, "/etc/sluice/temporal-ca") {
		t.Errorf("controller: mounts %s lack the receiver's tokens or Temporal's CA", mounts)
	}
	ports := fmt.Sprint(c["ports"])
	for _, p := range []string{"name:http", "containerPort:9090", "name:events", "containerPort:8081", "name:admission", "containerPort:8443"} {
		if !strings.Contains(ports, p) {
			t.Errorf("controller: ports %s lack %s", ports, p)
		}
	}
	svc := byKey[namespace+"/Service/sluice-receiver"]
	if svc == nil {
		t.Fatal("no sluice-receiver Service: the ApiServerSource and the webhooks call it")
	}
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if sel["app.kubernetes.io/component"] != "worker" {
		t.Errorf("sluice-receiver selects %v, want the worker's pods", sel)
	}
	svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if got := fmt.Sprint(svcPorts); strings.Contains(got, "name:http") || !strings.Contains(got, "targetPort:events") {
		t.Errorf("sluice-receiver's ports %s: want events, and none named http (the ServiceMonitor would scrape the controller twice)", got)
	}
	for _, k := range []string{"ClusterRoleBinding/sluice-receiver", "ClusterRoleBinding/sluice-receiver-admission", namespace + "/RoleBinding/sluice-receiver-admission"} {
		b := byKey[k]
		if b == nil {
			t.Errorf("no %s", k)
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		if !strings.Contains(fmt.Sprint(subjects), "name:sluice-worker") {
			t.Errorf("%s binds %v, not the worker's account the controller runs as", k, subjects)
		}
	}
}
