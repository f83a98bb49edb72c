package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluicehq/sluice/test/testkit"
)

// kubeconfigAs writes a kubeconfig that reaches the stack's API server as
// user, by impersonation (kubectl's --as): Kubernetes authenticates and
// authorizes each request as that user.
func kubeconfigAs(t *testing.T, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(stk.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCommandsThroughRollout: an on-call engineer with no Temporal access
// promotes a rollout through its Rollout resource. Kubernetes decides who
// may: a user whose RBAC allows patch on rollouts promotes, and the
// rollout's history names them as the API server authenticated them; one
// whose RBAC does not is refused by the API server, and nothing changes;
// nobody can ask in another's name.
func TestCommandsThroughRollout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := ctl(t)
	const name = "cmd1"
	firstRollout(t, c, name, map[string]string{"sluice.dev/steps": "50,100", "sluice.dev/hold": "1s", "sluice.dev/gates": "100"})
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oncall-commands", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sluice-rollout-commander"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}}
	if _, err := stk.Kube().RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stk.Kube().RbacV1().RoleBindings(ns).Delete(ctx, rb.Name, metav1.DeleteOptions{}) })

	deploy(t, name, "example.com/"+name+":v2", nil, nil)
	cand := name + "-00002"
	testkit.Eventually(t, 60*time.Second, 200*time.Millisecond, "the Rollout to show the gate", func() (bool, string) {
		p, cnd := rolloutField(ctx, name, ".status.phase"), rolloutField(ctx, name, ".status.candidate")
		return p == "AwaitingPromotion" && cnd == cand, p + " " + cnd
	})

	// bob may read the rollout in sluice status, but RBAC gives him no
	// patch on Rollouts: the API server refuses, and nothing changes.
	out, err := sluiceEnv(t, []string{"KUBECONFIG=" + kubeconfigAs(t, "bob")}, "promote", name, "--via", "kubernetes", "--reason", "not mine")
	if err == nil || !strings.Contains(out, "Kubernetes refused bob the command") || !strings.Contains(out, "forbidden") {
		t.Errorf("bob's promote through Kubernetes (%v):\n%s", err, out)
	}
	// alice may command, but not in bob's name: the admission policy
	// refuses a command whose by is not its writer.
	spoof, err := stk.Kubectl(ctx, "patch", "-n", ns, "rollout/"+name, "--as", "alice", "--type=merge",
		"-p", `{"spec":{"command":{"id":"spoofed","name":"abort","by":"bob","reason":"not me"}}}`)
	if err == nil || !strings.Contains(spoof, "spec.command.by must be your own user name, alice") {
		t.Errorf("a command in another's name (%v):\n%s", err, spoof)
	}
	time.Sleep(2 * time.Second) // what a worker would do with either, it would have begun
	if got := rolloutField(ctx, name, ".status.phase"); got != "AwaitingPromotion" {
		t.Fatalf("after refused commands the rollout is %s, want still AwaitingPromotion", got)
	}
	if got := rolloutField(ctx, name, ".spec.command"); got != "" {
		t.Errorf("a refused command left spec.command %s", got)
	}

	// alice promotes: the CLI talks to Kubernetes only.
	out, err = sluiceEnv(t, []string{"KUBECONFIG=" + kubeconfigAs(t, "alice")},
		"promote", name, "--via", "kubernetes", "--reason", "checked the dashboards")
	if err != nil || !strings.Contains(out, "(as alice)") {
		t.Fatalf("alice's promote through Kubernetes (%v):\n%s", err, out)
	}
	st := waitOutcome(t, c, svcTarget(name), cand, 60*time.Second)
	var promoted bool
	for _, cmd := range st.Commands {
		if cmd.Name == "promote" && cmd.By == "alice" && cmd.Reason == "checked the dashboards" && cmd.Rejected == "" {
			promoted = true
		}
		if cmd.By == "bob" {
			t.Errorf("the history records a command by bob: %+v", cmd)
		}
	}
	if !promoted {
		t.Errorf("the rollout's history has no promote by alice: %+v", st.Commands)
	}
	if got := rolloutField(ctx, name, ".status.command.accepted") + " " + rolloutField(ctx, name, ".status.command.by"); got != "true alice" {
		t.Errorf("status.command: accepted, by = %s", got)
	}
	if got := rolloutField(ctx, name, ".status.lastCommand.by"); got != "alice" {
		t.Errorf("status.lastCommand.by = %q, want alice", got)
	}
}
