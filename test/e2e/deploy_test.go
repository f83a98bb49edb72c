package e2e

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
)

// TestDeployManifests applies config/deploy to the real API server with
// Knative's Serving and Eventing CRDs (server-side apply; the stack applied
// it too, and runs the worker and receiver with their own ServiceAccounts'
// tokens, so every other scenario proves those rights suffice) and checks
// that each ServiceAccount has only the rights sluice needs.
func TestDeployManifests(t *testing.T) {
	ctx := context.Background()
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := stk.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", "deploy")); err != nil {
		t.Fatalf("apply config/deploy: %v\n%s", err, out)
	}
	// The webhook configuration as deployed calls the receiver's Service,
	// which the stack cannot reach: point it back at the stack's receiver.
	if err := stk.InstallAdmissionWebhook(ctx); err != nil {
		t.Fatal(err)
	}
	can := func(sa, verb, resource string) bool {
		out, _ := stk.Kubectl(ctx, "auth", "can-i", verb, resource, "-n", "default", "--as", "system:serviceaccount:sluice-system:"+sa)
		return strings.TrimSpace(out) == "yes"
	}
	for _, c := range []struct {
		sa, verb, resource string
		want               bool
	}{
		{"sluice-worker", "patch", "services.serving.knative.dev", true},
		{"sluice-worker", "patch", "routes.serving.knative.dev", true},
		{"sluice-worker", "list", "revisions.serving.knative.dev", true},
		{"sluice-worker", "watch", "configurations.serving.knative.dev", true},
		{"sluice-worker", "patch", "revisions.serving.knative.dev", true},
		{"sluice-worker", "patch", "configurations.serving.knative.dev", false},
		{"sluice-worker", "update", "services.serving.knative.dev", false},
		{"sluice-worker", "delete", "services.serving.knative.dev", false},
		{"sluice-worker", "get", "secrets", false},
		{"sluice-worker", "list", "pods", false},
		{"sluice-receiver", "get", "revisions.serving.knative.dev", true},
		{"sluice-receiver", "watch", "services.serving.knative.dev", true},
		{"sluice-receiver", "watch", "configurations.serving.knative.dev", true},
		{"sluice-receiver", "watch", "routes.serving.knative.dev", true},
		{"sluice-receiver", "watch", "revisions.serving.knative.dev", false},
		{"sluice-receiver", "patch", "services.serving.knative.dev", false},
		{"sluice-receiver", "get", "secrets", false},
		{"sluice-apiserversource", "watch", "revisions.serving.knative.dev", true},
		{"sluice-apiserversource", "watch", "routes.serving.knative.dev", false},
		{"sluice-apiserversource", "get", "configurations.serving.knative.dev", false},
		{"sluice-apiserversource", "get", "secrets", false},
	} {
		if got := can(c.sa, c.verb, c.resource); got != c.want {
			t.Errorf("%s can %s %s: %v, want %v", c.sa, c.verb, c.resource, got, c.want)
		}
	}

	// The receiver's two webhook configurations (cluster-scoped), for their caBundle.
	for cfg, want := range map[string]string{"mutatingwebhookconfigurations.admissionregistration.k8s.io/sluice-pin-latest": "yes",
		"mutatingwebhookconfigurations.admissionregistration.k8s.io/other":           "no",
		"validatingwebhookconfigurations.admissionregistration.k8s.io/sluice-policy": "yes",
		"validatingwebhookconfigurations.admissionregistration.k8s.io/other":         "no"} {
		out, _ := stk.Kubectl(ctx, "auth", "can-i", "patch", cfg,
			"--as", "system:serviceaccount:sluice-system:sluice-receiver")
		// The answer is the last line (kubectl warns first that the kind is not namespaced).
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.TrimSpace(lines[len(lines)-1]); got != want {
			t.Errorf("sluice-receiver can patch %s: %s, want %s", cfg, got, want)
		}
	}
	// The receiver's one Secret, in its own namespace: its webhook's certificates.
	for secret, want := range map[string]string{"secret/sluice-admission-certs": "yes", "secret/other": "no"} {
		out, _ := stk.Kubectl(ctx, "auth", "can-i", "get", secret, "-n", "sluice-system", "--as", "system:serviceaccount:sluice-system:sluice-receiver")
		if strings.TrimSpace(out) != want {
			t.Errorf("sluice-receiver can get %s in sluice-system: %s, want %s", secret, strings.TrimSpace(out), want)
		}
	}

	// With the worker's own token, not the admin's: a Configuration cannot
	// be patched and Secrets cannot be read; a Service's traffic and its
	// sluice.dev/ended annotation can be, and a Revision's scale bounds.
	token, err := stk.Kubectl(ctx, "create", "token", "sluice-worker", "-n", "sluice-system")
	if err != nil {
		t.Fatalf("token for sluice-worker: %v", err)
	}
	cfg := rest.CopyConfig(stk.Rest)
	cfg.BearerToken = strings.TrimSpace(token)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the worker listing Secrets: %v, want Forbidden", err)
	}
	serving, err := servingclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := ctl(t)
	firstRollout(t, c, "rbac", nil)
	if _, err := serving.ServingV1().Configurations("default").Patch(ctx, "rbac", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the worker patching a Configuration: %v, want Forbidden", err)
	}
	if err := (&activities.Activities{Knative: knative.Client{Serving: serving}}).SetScale(ctx, activities.ScaleInput{
		RevisionRef: knative.RevisionRef{Namespace: "default", Name: "rbac-00001"}, Bounds: knative.Pods(1)}); err != nil {
		t.Fatalf("the worker setting a Revision's scale bounds: %v", err)
	}
	if err := (&activities.Activities{Knative: knative.Client{Serving: serving}}).MarkEnded(ctx, activities.MarkInput{
		Object: knative.ObjectRef{Namespace: "default", Kind: knative.KindService, Name: "rbac"}, Revision: "rbac-00001", Outcome: "Aborted"}); err != nil {
		t.Fatalf("the worker marking a Service: %v", err)
	}
	if _, err := serving.ServingV1().Services("default").Patch(ctx, "rbac", types.MergePatchType, []byte(`{"spec":{"traffic":[{"revisionName":"rbac-00001","percent":100}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the worker patching a Service's traffic: %v", err)
	}
}

// TestReceiverAsDeployedRefusesAnonymousCommands runs the receiver with the
// environment config/deploy gives it and sends a command event without a
// token: it must be refused.
func TestReceiverAsDeployedRefusesAnonymousCommands(t *testing.T) {
	t.Parallel()
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "deploy", "510-receiver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.Unmarshal(bytes.Split(raw, []byte("\n---"))[0], &dep); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + stk.Kubeconfig, "TEMPORAL_ADDRESS=" + stk.TemporalAddr}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		// Its own address, and no second admission webhook beside the stack's.
		if e.ValueFrom == nil && e.Name != "SLUICE_RECEIVER_ADDR" && !strings.HasPrefix(e.Name, "SLUICE_ADMISSION_") {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(os.Getenv("SLUICE_BIN"), append(dep.Spec.Template.Spec.Containers[0].Args, "--listen", addr)...)
	cmd.Env = append(os.Environ(), env...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver did not get ready: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader(`{"target":"hello","namespace":"default","reason":"x"}`))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "anon-1", "Ce-Source": "/anyone", "Ce-Type": "dev.sluice.rollout.abort", "Content-Type": "application/json"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "accepts no command events") {
		t.Fatalf("an anonymous abort: %d %s", resp.StatusCode, body)
	}
}
