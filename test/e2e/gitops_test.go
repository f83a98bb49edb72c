package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
)

// gitManifest is a Service as it sits in a GitOps repository: its policy,
// its image and, if traffic is set, a spec.traffic block as written there.
func gitManifest(name, image, traffic string) string {
	m := `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: ` + name + `
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/steps: "20,100"
    sluice.dev/hold: 10m
spec:
  template:
    spec:
      containers:
        - image: ` + image + `
`
	if traffic != "" {
		m += "  traffic:\n" + traffic
	}
	return m
}

// gitOps applies manifests as a GitOps tool does: server-side, under its
// own field manager, taking over conflicting fields (Argo CD's and Flux's
// server-side apply); or client-side, as kubectl apply and Argo CD's
// default sync do.
type gitOps struct {
	t   *testing.T
	dir string
}

func (g gitOps) apply(manifest string, serverSide bool) {
	g.t.Helper()
	file := filepath.Join(g.dir, "service.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		g.t.Fatal(err)
	}
	args := []string{"apply", "-n", ns, "-f", file}
	if serverSide {
		args = append(args, "--server-side", "--field-manager=argocd-controller", "--force-conflicts")
	}
	if out, err := stk.Kubectl(context.Background(), args...); err != nil {
		g.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestGitOpsReapplyMidRollout: a GitOps tool re-applies the Service's
// manifest while a rollout holds. Set up as docs/gitops.md says — no
// spec.traffic in Git, so sluice alone owns it — neither a server-side nor
// a client-side re-apply touches the rollout's traffic, and it goes on to
// succeed. With spec.traffic in Git, the re-apply reverts the traffic:
// sluice sees drift and pauses, with a message that points at
// docs/gitops.md.
func TestGitOpsReapplyMidRollout(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	const name = "go1"
	g := gitOps{t: t, dir: t.TempDir()}
	target := svcTarget(name)

	g.apply(gitManifest(name, "example.com/go1:v1", ""), true)
	waitOutcome(t, c, target, name+"-00001", 60*time.Second)
	waitClosed(t, c, name)

	// The recipe: spec.traffic is not in Git.
	v2 := gitManifest(name, "example.com/go1:v2", "")
	g.apply(v2, true)
	waitStatus(t, c, target, 60*time.Second, "go1-00002 holding at 20%", func(s api.Status) bool {
		return s.Candidate == name+"-00002" && s.Phase == api.PhaseHolding && s.Weight == 20
	})
	before := serviceTraffic(t, name)
	g.apply(v2, true)  // a sync, server-side
	g.apply(v2, false) // and client-side
	time.Sleep(3 * time.Second)
	st, err := c.Status(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused || serviceTraffic(t, name) != before {
		t.Fatalf("a re-apply without spec.traffic changed the rollout: paused %v (%s), traffic %s, was %s",
			st.Paused, st.PauseReason, serviceTraffic(t, name), before)
	}
	if out, err := sluice(t, "promote", name); err != nil {
		t.Fatalf("promote: %v\n%s", err, out)
	}
	if st := waitOutcome(t, c, target, name+"-00002", 60*time.Second); st.Outcome != api.OutcomeSucceeded {
		t.Fatalf("with the recipe, the rollout ended %s: %s", st.Outcome, st.Reason)
	}
	waitClosed(t, c, name)

	// Without it: spec.traffic in Git as many write it. The client-side
	// apply above left kubectl's last-applied annotation, and with it the
	// next server-side apply is three writes: the change (which the pin
	// webhook pins), a move of the managed fields, and the manifest again
	// with no template change, so not pinned — its latestRevision target
	// then sends the new Revision everything if it is Ready first. A GitOps
	// tool that only ever applies server-side writes once.
	if out, err := stk.Kubectl(context.Background(), "annotate", "-n", ns, "service/"+name, "kubectl.kubernetes.io/last-applied-configuration-"); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	v3 := gitManifest(name, "example.com/go1:v3", "    - latestRevision: true\n      percent: 100\n")
	g.apply(v3, true)
	waitStatus(t, c, target, 60*time.Second, "go1-00003 holding at 20%", func(s api.Status) bool {
		return s.Candidate == name+"-00003" && s.Phase == api.PhaseHolding && s.Weight == 20
	})
	g.apply(v3, true) // the next sync puts Git's traffic back
	st = waitStatus(t, c, target, 30*time.Second, "the rollout to pause for drift", func(s api.Status) bool {
		return s.Paused && s.Drifted
	})
	if !strings.Contains(st.PauseReason, "docs/gitops.md") {
		t.Errorf("the drift pause does not point at docs/gitops.md: %s", st.PauseReason)
	}
	if out, err := sluice(t, "abort", name, "--reason", "done"); err != nil {
		t.Fatalf("abort: %v\n%s", err, out)
	}
	waitOutcome(t, c, target, name+"-00003", 60*time.Second)
}
