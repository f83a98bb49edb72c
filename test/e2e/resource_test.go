package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/test/stack"
	"github.com/sluicehq/sluice/test/testkit"
)

// waitRollout is what a pipeline runs after kubectl apply, with kubectl
// alone: wait for the rollout of candidate to end, then ask whether its
// candidate has all the traffic (Ready). It fails on a rollback as soon as
// the rollout ends, not at the timeout.
func waitRollout(ctx context.Context, name, candidate string) (string, error) {
	out, err := stk.Kubectl(ctx, "wait", "-n", ns, "rollout/"+name, "--timeout=3m",
		"--for=jsonpath={.status.candidate}="+candidate, "--for=jsonpath={.status.ended}=true")
	if err != nil {
		return out, err
	}
	more, err := stk.Kubectl(ctx, "wait", "-n", ns, "rollout/"+name, "--for=condition=Ready", "--timeout=0")
	return out + more, err
}

// rolloutField reads one field of a Rollout with kubectl's jsonpath.
func rolloutField(ctx context.Context, name, path string) string {
	out, _ := stk.Kubectl(ctx, "get", "-n", ns, "rollout/"+name, "-o", "jsonpath={"+path+"}")
	return out
}

// keepObject saves a Rollout as kubectl prints it, for the health checks'
// tests (captured objects of every state; see charts/health).
func keepObject(t *testing.T, ctx context.Context, name, state string) {
	t.Helper()
	dir := os.Getenv("SLUICE_ARTIFACTS")
	if dir == "" {
		return
	}
	out, err := stk.Kubectl(ctx, "get", "-n", ns, "rollout/"+name, "-o", "json")
	if err != nil {
		t.Logf("keep Rollout %s (%s): %v", name, state, err)
		return
	}
	dir = filepath.Join(dir, "rollouts")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, state+".json"), []byte(out), 0o644)
	}
}

// TestRolloutResource: each rollout shows where kubectl looks. kubectl get
// rollouts shows its phase and the candidate's share while it runs; a hold
// ending at a gate shows as awaiting promotion; a Rollout deleted in the
// middle comes back and the rollout goes on unharmed; a pipeline's kubectl
// wait returns 0 once the candidate has all the traffic and fails as soon
// as a candidate is rolled back; kubectl describe ksvc tells the story; the
// rollback reaches Slack, Teams and a webhook, once each.
func TestRolloutResource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := ctl(t)
	const name = "rr1"
	chat, subscribe := notifications(t)
	subscribe["sluice.dev/steps"], subscribe["sluice.dev/hold"], subscribe["sluice.dev/gates"] = "20,100", "8s", "100"
	firstRollout(t, c, name, subscribe)
	if got := rolloutField(ctx, name, ".status.outcome"); got != "Succeeded" {
		t.Fatalf("after the first rollout, the Rollout's outcome is %q", got)
	}

	deploy(t, name, "example.com/rr1:v2", nil, nil)
	cand := name + "-00002"
	testkit.Eventually(t, 60*time.Second, 200*time.Millisecond, "kubectl get rollouts to show "+cand+" holding at 20%", func() (bool, string) {
		out, _ := stk.Kubectl(ctx, "get", "rollouts", "-n", ns, name)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			return false, out
		}
		f := strings.Fields(lines[1])
		// NAME PHASE CANDIDATE WEIGHT STEP ANALYSIS? OUTCOME? READY AGE
		return len(f) >= 6 && f[1] == "Holding" && f[2] == cand && f[3] == "20" && f[4] == "1/2", out
	})
	if out, _ := stk.Kubectl(ctx, "get", "rollouts", "-n", ns, name); !strings.Contains(out, "PHASE") || !strings.Contains(out, "WEIGHT") {
		t.Errorf("kubectl get rollouts has no PHASE and WEIGHT columns:\n%s", out)
	}
	keepObject(t, ctx, name, "progressing")
	wide, _ := stk.Kubectl(ctx, "get", "rollouts", "-n", ns, name, "-o", "wide")
	t.Logf("kubectl get rollouts -o wide, mid-rollout:\n%s", wide)
	// Without a UI (Temporal's production topology without its UI server)
	// there is no link to check.
	if stk.UIURL != "" {
		if got, want := rolloutField(ctx, name, ".status.url"), stk.UIURL+"/namespaces/default/workflows/rollout%2Fdefault%2Fservice%2F"+name; got != want {
			t.Errorf("the Rollout links to %q, want the rollout's page in the Temporal UI %q", got, want)
		}
	}
	uid := rolloutField(ctx, name, ".metadata.uid")

	// Deleted in the middle, it comes back from the workflow; the rollout
	// does not notice.
	if _, err := stk.Kubectl(ctx, "delete", "-n", ns, "rollout/"+name, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, 200*time.Millisecond, "the deleted Rollout to come back", func() (bool, string) {
		now := rolloutField(ctx, name, ".metadata.uid")
		cnd := rolloutField(ctx, name, ".status.candidate")
		return now != "" && now != uid && cnd == cand, now + " " + cnd
	})

	// The hold ends at the gate before 100%: no progress event says so,
	// the worker reads it from the workflow.
	testkit.Eventually(t, 40*time.Second, 200*time.Millisecond, "the Rollout to show the gate", func() (bool, string) {
		p := rolloutField(ctx, name, ".status.phase")
		return p == "AwaitingPromotion", p + ": " + rolloutField(ctx, name, ".status.message")
	})
	if got := rolloutField(ctx, name, `.status.conditions[?(@.type=="Reconciling")].status`); got != "True" {
		t.Errorf("at the gate, Reconciling is %q", got)
	}
	keepObject(t, ctx, name, "suspended")

	type result struct {
		out string
		err error
	}
	waited := make(chan result, 1)
	go func() {
		out, err := waitRollout(ctx, name, cand)
		waited <- result{out, err}
	}()
	time.Sleep(time.Second) // kubectl wait is waiting
	if out, err := sluice(t, "promote", name, "--reason", "pipeline test"); err != nil {
		t.Fatalf("promote: %v\n%s", err, out)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("kubectl wait after a successful rollout: %v\n%s", r.err, r.out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("kubectl wait did not return after the rollout succeeded")
	}
	if got := rolloutField(ctx, name, ".status.lastCommand.reason"); got != "pipeline test" {
		t.Errorf("the last command's reason is %q, want the promote's", got)
	}
	keepObject(t, ctx, name, "healthy")

	// A candidate whose container exits is rolled back: the pipeline's
	// wait fails, as soon as the rollout ends.
	waitClosed(t, c, name)
	deploy(t, name, "example.com/rr1:v3", nil, map[string]string{stack.AnnotationFail: "true"})
	bad := name + "-00003"
	testkit.Eventually(t, 30*time.Second, 200*time.Millisecond, "the Rollout to show "+bad, func() (bool, string) {
		got := rolloutField(ctx, name, ".status.candidate")
		return got == bad, got
	})
	start := time.Now()
	out, err := waitRollout(ctx, name, bad)
	if err == nil {
		t.Fatalf("kubectl wait returned 0 for a rolled back candidate:\n%s", out)
	}
	if !strings.Contains(out, "condition not met") {
		t.Errorf("kubectl wait on a rollback (%v, after %s):\n%s", err, time.Since(start).Round(time.Second), out)
	}
	if got := rolloutField(ctx, name, ".status.outcome"); got != "RolledBack" {
		t.Errorf("outcome %q, want RolledBack", got)
	}
	if got := rolloutField(ctx, name, `.status.conditions[?(@.type=="Stalled")].status`); got != "True" {
		t.Errorf("after a rollback, Stalled is %q", got)
	}
	keepObject(t, ctx, name, "degraded")
	// Subscribed to rollbacks only, the chat services heard of this one
	// rollback alone.
	checkRollbackNotified(t, chat, name, bad)

	// The worker's /metrics says the same.
	testkit.Eventually(t, 20*time.Second, 500*time.Millisecond, "the worker's rollout metrics", func() (bool, string) {
		resp, err := http.Get("http://" + stk.WorkerHTTP + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "sluice_rollout") && strings.Contains(l, name) || strings.HasPrefix(l, "sluice_rollouts_ended_total") ||
				strings.HasPrefix(l, "sluice_traffic_write_seconds_count") {
				lines = append(lines, l)
			}
		}
		got := strings.Join(lines, "\n")
		return strings.Contains(got, `sluice_rollout_ended{name="`+name+`",namespace="default",outcome="RolledBack"} 1`) &&
			strings.Contains(got, `sluice_rollouts_ended_total{outcome="RolledBack"}`) &&
			strings.Contains(got, `sluice_rollout_candidate_weight_percent{candidate="`+bad+`",name="`+name+`"`) &&
			strings.Contains(got, `sluice_traffic_write_seconds_count{visible="true"}`), got
	})

	// kubectl describe ksvc tells the story, each event once.
	described, err := stk.Kubectl(ctx, "describe", "ksvc", "-n", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RolloutStarted", "RolloutStep", "Promoted", "RolloutSucceeded", "RolledBack"} {
		if !strings.Contains(described, want) {
			t.Errorf("kubectl describe ksvc %s shows no %s event:\n%s", name, want, described)
		}
	}
}
