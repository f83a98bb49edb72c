package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/test/stack"
)

// TestDeployManifests applies config/deploy to the real API server with
// Knative's Serving and Eventing CRDs (server-side apply) and checks that
// each ServiceAccount has exactly the rights sluice needs.
func TestDeployManifests(t *testing.T) {
	ctx := context.Background()
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := stk.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", "deploy")); err != nil {
		t.Fatalf("apply config/deploy: %v\n%s", err, out)
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
		{"sluice-worker", "patch", "revisions.serving.knative.dev", false},
		{"sluice-worker", "update", "services.serving.knative.dev", false},
		{"sluice-worker", "delete", "services.serving.knative.dev", false},
		{"sluice-worker", "get", "secrets", false},
		{"sluice-worker", "list", "pods", false},
		{"sluice-receiver", "get", "revisions.serving.knative.dev", true},
		{"sluice-receiver", "patch", "services.serving.knative.dev", false},
		{"sluice-receiver", "get", "secrets", false},
		{"sluice-apiserversource", "watch", "revisions.serving.knative.dev", true},
		{"sluice-apiserversource", "watch", "routes.serving.knative.dev", true},
		{"sluice-apiserversource", "get", "configurations.serving.knative.dev", false},
		{"sluice-apiserversource", "get", "secrets", false},
	} {
		if got := can(c.sa, c.verb, c.resource); got != c.want {
			t.Errorf("%s can %s %s: %v, want %v", c.sa, c.verb, c.resource, got, c.want)
		}
	}

	// With the worker's own token, not the admin's: a Revision cannot be
	// patched and Secrets cannot be read; a Service's traffic can be.
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
	if _, err := serving.ServingV1().Revisions("default").Patch(ctx, "rbac-00001", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the worker patching a Revision: %v, want Forbidden", err)
	}
	if _, err := serving.ServingV1().Services("default").Patch(ctx, "rbac", types.MergePatchType, []byte(`{"spec":{"traffic":[{"revisionName":"rbac-00001","percent":100}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the worker patching a Service's traffic: %v", err)
	}
}
