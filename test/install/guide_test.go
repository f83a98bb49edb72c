// Package install follows docs/install.md on the local stack, step by step,
// with the commands the guide prints: from a cluster with Knative and no
// sluice to a first rollout watched with the CLI, an upgrade under it, and
// the uninstall. test/run.sh runs it on its own (SLUICE_INSTALL_GUIDE=1),
// on a stack of its own beside the e2e package's, at a lower CPU priority.
//
// What it cannot do here, and does instead (each also logged as it runs):
//   - Knative and Temporal are the stack's (Knative Serving's own controller,
//     webhook and autoscaler; the Temporal dev server), not installed by
//     Knative's or Temporal's own instructions; Temporal Cloud is not tried.
//   - Images are never pulled and kwok's pods run nothing. The test plays the
//     kubelet for sluice's pods: it reads each Deployment the chart installed
//     from the API server and runs its container's command with its
//     container's environment (its ConfigMaps and Secrets resolved), as the
//     sluice binary this tree builds, with the ServiceAccount's token.
//   - Cluster networking: in-cluster names and Services do not resolve here.
//     The worker and receiver reach Temporal at the dev server's address
//     (for temporal-frontend.temporal:7233), the CLI without a port-forward,
//     the API server calls the receiver's webhooks at its loopback address
//     (the webhook configurations are pointed there between Helm's
//     commands), and Eventing's adapter sends to the receiver directly.
//   - `kn` is not built here: the test makes the same writes with kubectl,
//     with images under example.com, whose tags the stack's Knative does not
//     resolve (no registry).
//   - The guide's hold of 2m is shortened to 3s.
package install

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
)

const (
	sluiceNS   = "sluice-system"
	temporalNS = "rollouts"
)

// guide is the test's view of docs/install.md and of the stack it runs on.
type guide struct {
	t    *testing.T
	s    *stack.Stack
	root string
	doc  string
	// path puts sluice, helm, kubectl and temporal first, as a user has them.
	path string
	// pods are the running stand-ins for sluice's pods, by Deployment.
	pods map[string]*pod
	// admission is where the receiver serves its webhooks.
	admission string
}

type pod struct {
	stop func(time.Duration)
	addr string
}

func TestInstallGuide(t *testing.T) {
	if os.Getenv("SLUICE_INSTALL_GUIDE") == "" {
		t.Skip("SLUICE_INSTALL_GUIDE is not set: test/run.sh runs this on its own, after the other packages")
	}
	g := start(t)

	// 2. Temporal: a namespace with a retention, then sluice's search attributes.
	g.logStep("2. Temporal (the stack's dev server stands in for Temporal's Helm chart)")
	g.sh(g.command("temporal operator namespace create", "<address>", g.s.TemporalAddr))
	setup := g.command("TEMPORAL_ADDRESS=<address> TEMPORAL_NAMESPACE=<namespace>", "<address>", g.s.TemporalAddr, "<namespace>", temporalNS)
	g.t.Log("not covered: TEMPORAL_API_KEY (Temporal Cloud)")
	g.sh(strings.Replace(setup, "TEMPORAL_API_KEY=<key> ", "", 1))

	// 3. sluice, with Helm.
	g.logStep("3. sluice with Helm")
	install := g.command("helm install sluice charts/sluice")
	g.sh(install)
	g.runPods()

	// 4. A first rollout, watched from the CLI.
	g.logStep("4. A first rollout")
	cli := strings.Replace(g.command("export TEMPORAL_ADDRESS=127.0.0.1:7233"), "127.0.0.1:7233", g.s.TemporalAddr, 1)
	g.t.Log("not covered: kubectl port-forward to Temporal (the dev server listens on this machine)")
	if out := g.sh(cli + "\n" + g.command("sluice version")); !strings.Contains(out, "@sluice-worker/") {
		t.Errorf("sluice version shows no worker polling:\n%s", out)
	}
	g.kubectl("apply", "-f", g.writeFile("hello.yaml", helloService("example.com/hello:1")))
	g.waitServiceReady("hello-00001")
	annotate := strings.Replace(g.command("kubectl annotate ksvc hello"), "sluice.dev/hold=2m", "sluice.dev/hold=3s", 1)
	g.sh(annotate)
	// kn service update hello --image <new image>, as kubectl.
	patched := g.kubectl("patch", "ksvc", "hello", "--type", "merge", "-p",
		`{"spec":{"template":{"spec":{"containers":[{"image":"example.com/hello:2"}]}}}}`)
	g.t.Logf("kn service update, as kubectl patch: %s", patched)
	if traffic := g.kubectl("get", "ksvc", "hello", "-o", "jsonpath={.spec.traffic}"); !strings.Contains(traffic, `"revisionName":"hello-00001"`) || strings.Contains(traffic, `"latestRevision":true`) {
		t.Errorf("the admission webhook did not pin the Service's traffic in the write that changed its template: %s", traffic)
	}
	g.waitPhase(cli, "AwaitingPromotion", "hello-00002")

	// Upgrade while the rollout waits at its gate: `helm upgrade`, then the
	// rolling update — the new worker up before the old one stops.
	g.logStep("Upgrading sluice, under the rollout at its gate")
	upgrade := strings.Replace(g.command("helm upgrade sluice sluice-<version>.tgz"), "sluice-<version>.tgz", "charts/sluice", 1)
	g.t.Log("not covered: the release's packaged chart and a newer image (the chart of this tree, the same binary; TestUpgradeUnderRunningRollouts upgrades across releases)")
	g.helm(upgrade)
	g.rollWorker()
	g.waitPhase(cli, "AwaitingPromotion", "hello-00002")
	g.sh(cli + "\n" + g.command("sluice promote hello"))
	watch := g.command("sluice status hello --watch")
	if out := g.sh(cli + "\n" + watch + " --timeout 3m"); !strings.Contains(out, "Succeeded") {
		t.Errorf("sluice status --watch did not end with Succeeded:\n%s", out)
	}
	if traffic := g.kubectl("get", "ksvc", "hello", "-o", "jsonpath={.status.traffic[*].revisionName}={.status.traffic[*].percent}"); traffic != "hello-00002=100" {
		t.Errorf("after the rollout Knative serves %q, want hello-00002=100", traffic)
	}
	// The Rollout resource and the events, written by the worker with the
	// chart's RBAC alone, a moment after the rollout's end.
	for _, c := range []struct{ line, want string }{
		{"kubectl get rollout hello", "Succeeded"}, {"kubectl describe ksvc hello", "RolloutSucceeded"},
	} {
		testkit.Eventually(t, 30*time.Second, time.Second, c.line+" to show "+c.want, func() (bool, string) {
			out := g.sh(g.command(c.line))
			return strings.Contains(out, c.want) && strings.Contains(out, "hello-00002"), out
		})
	}

	// Uninstalling, in the guide's order.
	g.logStep("Uninstalling")
	if out := g.sh(cli + "\n" + g.command("sluice list --running")); strings.Contains(out, "hello") {
		t.Errorf("sluice list --running after the rollout ended:\n%s", out)
	}
	webhooksOff := strings.Replace(g.command("helm upgrade sluice <chart> -n sluice-system --reuse-values --set admissionWebhooks.enabled=false"), "<chart>", "charts/sluice", 1)
	g.helm(webhooksOff)
	for _, gone := range []string{"mutatingwebhookconfiguration/sluice-pin-latest", "validatingwebhookconfiguration/sluice-policy"} {
		if out := g.kubectl("get", gone, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("after the guide's webhook step %s is still there", gone)
		}
	}
	for _, name := range []string{"sluice-worker", "sluice-receiver"} {
		g.pods[name].stop(15 * time.Second)
	}
	g.sh(g.command("helm uninstall sluice -n sluice-system"))
	g.sh(g.command("kubectl annotate ksvc --all -A sluice.dev/ended-"))
	for _, kind := range []string{"deployment", "configmap", "serviceaccount"} {
		if out := g.kubectl("get", kind, "-n", sluiceNS, "-l", "app.kubernetes.io/name=sluice", "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("after helm uninstall: %s", out)
		}
	}
	if out := g.kubectl("get", "ksvc", "hello", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"); out != "True" {
		t.Errorf("hello is not Ready after sluice is gone: %s", out)
	}
}

func start(t *testing.T) *guide {
	t.Helper()
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	helm := os.Getenv("SLUICE_HELM_BIN")
	if helm == "" {
		t.Fatal("SLUICE_HELM_BIN is not set: run the tests with `make test`, which builds Helm")
	}
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	crds, err := stack.KnativeCRDDirs(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if a := os.Getenv("SLUICE_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "install-guide")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := stack.Start(ctx, stack.Options{
		Dir: dir, Tools: tools, Root: root, CRDDirs: crds, NoSluice: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"sluice": tools.Sluice, "helm": helm, "kubectl": filepath.Join(tools.KubeDir, "kubectl"), "temporal": tools.Temporal,
	} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return &guide{t: t, s: s, root: root, doc: string(doc), path: bin + ":" + os.Getenv("PATH"), pods: map[string]*pod{}}
}

func (g *guide) logStep(step string) { g.t.Logf("install.md — %s", step) }

// command finds the command in install.md that starts with prefix — in an
// sh block (continuation lines joined, a trailing comment dropped) or, after
// those, in a code span of its prose — and replaces each pair of old, new
// in it. The test fails if the guide no longer has it: the guide and this
// test change together.
func (g *guide) command(prefix string, replace ...string) string {
	g.t.Helper()
	blocks, spans := commands(g.doc)
	for _, cmd := range append(blocks, spans...) {
		if strings.HasPrefix(cmd, prefix) {
			return strings.NewReplacer(replace...).Replace(cmd)
		}
	}
	g.t.Fatalf("docs/install.md has no command starting %q", prefix)
	return ""
}

var (
	comment = regexp.MustCompile(`\s+#\s.*$`)
	span    = regexp.MustCompile("`([^`]+)`")
)

// commands reads the commands of sh blocks, and the code spans of the
// prose (a span may wrap across lines).
func commands(doc string) (blocks, spans []string) {
	in := false
	var cur strings.Builder
	var prose []string
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		trimmed := strings.TrimSpace(sc.Text())
		switch {
		case trimmed == "```sh":
			in = true
			continue
		case trimmed == "```":
			in = false
			continue
		case !in:
			prose = append(prose, trimmed)
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`))
			continue
		}
		cur.WriteString(trimmed)
		cmd := strings.TrimSpace(comment.ReplaceAllString(cur.String(), ""))
		cur.Reset()
		if cmd != "" {
			blocks = append(blocks, cmd)
		}
	}
	for _, m := range span.FindAllStringSubmatch(strings.Join(prose, " "), -1) {
		spans = append(spans, m[1])
	}
	return blocks, spans
}

// sh runs a command as a user would, in the clone, against the stack.
func (g *guide) sh(script string) string {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = g.root
	cmd.Env = append(os.Environ(), "PATH="+g.path, "KUBECONFIG="+g.s.Kubeconfig,
		"HELM_CONFIG_HOME="+filepath.Join(g.t.TempDir(), "helm"), "HELM_CACHE_HOME="+filepath.Join(g.t.TempDir(), "helm-cache"))
	out, err := cmd.CombinedOutput()
	g.t.Logf("$ %s\n%s", script, out)
	if err != nil {
		g.t.Fatalf("%s: %v", script, err)
	}
	return string(out)
}

func (g *guide) kubectl(args ...string) string {
	g.t.Helper()
	return testkit.Kubectl(g.t, g.s.Kubectl, args...)
}

// helm runs one of the guide's helm commands, with the webhook
// configurations back as the chart made them for the command's length (the
// test points them at the receiver's loopback address otherwise).
func (g *guide) helm(cmd string) {
	g.t.Helper()
	g.pointWebhooks("")
	g.sh(cmd)
	g.pointWebhooks(g.admission)
}

func (g *guide) writeFile(name, body string) string {
	g.t.Helper()
	path := filepath.Join(g.t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return path
}

func helloService(image string) string {
	return fmt.Sprintf(`apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
  namespace: %s
spec:
  template:
    spec:
      containers:
        - image: %s
`, stack.Namespace, image)
}

func (g *guide) waitServiceReady(revision string) {
	g.t.Helper()
	testkit.Eventually(g.t, 2*time.Minute, 500*time.Millisecond, "hello to serve "+revision, func() (bool, string) {
		out, err := g.s.Kubectl(context.Background(), "get", "ksvc", "hello", "-o",
			`jsonpath={.status.latestReadyRevisionName} {.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == revision+" True", out
	})
}

func (g *guide) waitPhase(cli, phase, candidate string) {
	g.t.Helper()
	testkit.Eventually(g.t, 3*time.Minute, time.Second, "the rollout of hello in "+phase, func() (bool, string) {
		cmd := exec.Command("bash", "-c", cli+"\nsluice status hello -o json")
		cmd.Env = append(os.Environ(), "PATH="+g.path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return false, string(out)
		}
		var st struct{ Phase, Candidate string }
		if err := json.Unmarshal(out, &st); err != nil {
			return false, string(out)
		}
		return st.Phase == phase && st.Candidate == candidate, string(out)
	})
}

// runPods plays the kubelet for the worker and receiver the chart installed
// (see the package comment), then runs Eventing's adapter for the
// ApiServerSource, sending to the receiver.
func (g *guide) runPods() {
	g.t.Helper()
	g.runPod("sluice-receiver")
	g.runPod("sluice-worker")
	g.pointWebhooks(g.admission)
	if err := g.s.StartAdapter(context.Background(), "http://"+g.pods["sluice-receiver"].addr+"/"); err != nil {
		g.t.Fatal(err)
	}
}

// rollWorker replaces the worker as a rolling update does: the new pod from
// the Deployment as it is now, ready before the old one gets SIGTERM.
func (g *guide) rollWorker() {
	g.t.Helper()
	old := g.pods["sluice-worker"]
	g.runPod("sluice-worker")
	old.stop(15 * time.Second)
}

// deployment is the part of an installed Deployment a kubelet reads.
type deployment struct {
	Spec struct {
		Template struct {
			Spec struct {
				ServiceAccountName string `json:"serviceAccountName"`
				Containers         []struct {
					Args    []string `json:"args"`
					EnvFrom []struct {
						ConfigMapRef *struct{ Name string } `json:"configMapRef"`
					} `json:"envFrom"`
					Env []struct {
						Name      string `json:"name"`
						Value     string `json:"value"`
						ValueFrom *struct {
							SecretKeyRef *struct {
								Name, Key string
								Optional  *bool
							} `json:"secretKeyRef"`
							FieldRef *struct {
								FieldPath string `json:"fieldPath"`
							} `json:"fieldRef"`
						} `json:"valueFrom"`
					} `json:"env"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

func (g *guide) runPod(name string) {
	g.t.Helper()
	var d deployment
	if err := json.Unmarshal([]byte(g.kubectl("get", "deployment", name, "-n", sluiceNS, "-o", "json")), &d); err != nil {
		g.t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		g.t.Fatalf("%s has %d containers, want 1", name, len(spec.Containers))
	}
	c := spec.Containers[0]
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		var cm struct{ Data map[string]string }
		if err := json.Unmarshal([]byte(g.kubectl("get", "configmap", from.ConfigMapRef.Name, "-n", sluiceNS, "-o", "json")), &cm); err != nil {
			g.t.Fatal(err)
		}
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = sluiceNS // what the kubelet gives the pod
		case e.ValueFrom.FieldRef != nil:
			g.t.Fatalf("%s: %s comes from the pod's %s, which this runner does not give", name, e.Name, e.ValueFrom.FieldRef.FieldPath)
		default:
			g.t.Fatalf("%s: %s comes from a Secret; the guide's install sets none", name, e.Name)
		}
	}
	if env["TEMPORAL_NAMESPACE"] != temporalNS {
		g.t.Errorf("%s: TEMPORAL_NAMESPACE %q from the guide's helm install, want %q", name, env["TEMPORAL_NAMESPACE"], temporalNS)
	}
	kubeconfig, err := g.s.ServiceAccountKubeconfig(context.Background(), sluiceNS, spec.ServiceAccountName)
	if err != nil {
		g.t.Fatal(err)
	}
	// What a pod has that a process here does not: its account's token, the
	// cluster's DNS for Temporal, its own network for its ports.
	env["KUBECONFIG"] = kubeconfig
	env["TEMPORAL_ADDRESS"] = g.s.TemporalAddr
	addr := g.freeAddr()
	ready := "http://" + addr + "/readyz"
	switch c.Args[0] {
	case "worker":
		env["SLUICE_HTTP_ADDR"] = addr
	case "receiver":
		env["SLUICE_RECEIVER_ADDR"] = addr
		if env["SLUICE_ADMISSION_ADDR"] != "" {
			g.admission = g.freeAddr()
			env["SLUICE_ADMISSION_ADDR"] = g.admission
			env["SLUICE_ADMISSION_HOSTS"] += ",127.0.0.1"
		}
	}
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	g.t.Logf("running the pod of %s: sluice %s with %s", name, strings.Join(c.Args, " "), strings.Join(list, " "))
	stop, err := g.s.Spawn(context.Background(), name+"-"+fmt.Sprint(time.Now().UnixNano()), list, stack.HTTPReady(ready), g.s.Sluice(), c.Args...)
	if err != nil {
		g.t.Fatal(err)
	}
	g.pods[name] = &pod{stop: stop, addr: addr}
}

func (g *guide) freeAddr() string {
	g.t.Helper()
	port, err := stack.FreePort()
	if err != nil {
		g.t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// pointWebhooks points both webhook configurations' clients at the
// receiver's loopback address, or with addr "" back at its Service as the
// chart wrote them.
func (g *guide) pointWebhooks(addr string) {
	g.t.Helper()
	for _, kind := range []string{"mutatingwebhookconfiguration/sluice-pin-latest", "validatingwebhookconfiguration/sluice-policy"} {
		out := g.kubectl("get", kind, "--ignore-not-found", "-o", "json")
		if strings.TrimSpace(out) == "" {
			continue
		}
		var cfg struct {
			Webhooks []struct {
				ClientConfig struct {
					URL     string `json:"url"`
					Service *struct {
						Path string `json:"path"`
					} `json:"service"`
				} `json:"clientConfig"`
			} `json:"webhooks"`
		}
		if err := json.Unmarshal([]byte(out), &cfg); err != nil {
			g.t.Fatal(err)
		}
		var ops []map[string]any
		for i, wh := range cfg.Webhooks {
			p := fmt.Sprintf("/webhooks/%d/clientConfig", i)
			switch {
			case addr != "" && wh.ClientConfig.Service != nil:
				ops = append(ops, map[string]any{"op": "remove", "path": p + "/service"},
					map[string]any{"op": "add", "path": p + "/url", "value": "https://" + addr + wh.ClientConfig.Service.Path})
			case addr == "" && wh.ClientConfig.URL != "":
				u, err := url.Parse(wh.ClientConfig.URL)
				if err != nil {
					g.t.Fatal(err)
				}
				path := u.Path
				ops = append(ops, map[string]any{"op": "remove", "path": p + "/url"},
					map[string]any{"op": "add", "path": p + "/service", "value": map[string]any{"namespace": sluiceNS, "name": "sluice-receiver", "path": path, "port": 443}})
			}
		}
		if len(ops) == 0 {
			continue
		}
		b, _ := json.Marshal(ops)
		g.kubectl("patch", kind, "--type", "json", "-p", string(b))
	}
}
