package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// typoManifest is a Service as a service owner writes it, with the gate
// misspelt: sluice.dev/gate for sluice.dev/gates.
func typoManifest(name, image string) string {
	return manifest(name, image, "sluice.dev/gate")
}

// manifest is that Service with its gate under gateKey.
func manifest(name, image, gateKey string) string {
	return `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: ` + name + `
  annotations:
    sluice.dev/rollout: enabled
    sluice.dev/steps: "50,100"
    sluice.dev/hold: 1s
    ` + gateKey + `: "100"
spec:
  template:
    spec:
      containers:
        - image: ` + image + `
`
}

const gateTypo = "sluice.dev/gate: is not a sluice annotation, and sluice would ignore it; did you mean sluice.dev/gates?"

// A misspelt gate is shown where the service owner makes it: kubectl
// apply prints sluice's warning; a namespace labelled
// sluice.dev/admission=strict refuses the write and nothing is stored; and
// a worker given the Service anyway never moves traffic — each rollout
// fails before its first step, with the message in its status and its
// progress event.
func TestPolicyTypoAtKubectlApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := ctl(t)
	dir := t.TempDir()
	applyWith := func(name, namespace, image, gateKey string) (string, error) {
		file := filepath.Join(dir, name+"-"+namespace+".yaml")
		if err := os.WriteFile(file, []byte(manifest(name, image, gateKey)), 0o600); err != nil {
			t.Fatal(err)
		}
		return stk.Kubectl(ctx, "apply", "-n", namespace, "-f", file)
	}
	apply := func(name, namespace, image string) (string, error) {
		return applyWith(name, namespace, image, "sluice.dev/gate")
	}

	out, err := apply("p40", ns, "example.com/p40:v1")
	if err != nil {
		t.Fatalf("kubectl apply in a namespace that is not strict: %v", err)
	}
	if !strings.Contains(out, "Warning: sluice: "+gateTypo) {
		t.Fatalf("kubectl apply printed no warning naming sluice.dev/gates:\n%s", out)
	}

	strict := "p40-strict"
	if _, err := stk.Kubectl(ctx, "create", "namespace", strict); err != nil {
		t.Fatal(err)
	}
	if _, err := stk.Kubectl(ctx, "label", "namespace", strict, "sluice.dev/admission=strict"); err != nil {
		t.Fatal(err)
	}
	out, err = apply("p40", strict, "example.com/p40:v1")
	if err == nil || !strings.Contains(out, "sluice refuses this Service's rollout policy") || !strings.Contains(out, "did you mean sluice.dev/gates?") {
		t.Fatalf("strict namespace: kubectl apply %v:\n%s", err, out)
	}
	if _, err := stk.Serving.ServingV1().Services(strict).Get(ctx, "p40", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("strict namespace: the refused Service was stored (%v)", err)
	}
	// The policy fixed, the strict namespace takes it without a word, and
	// Knative's Configuration for it (a copy of the Service's annotations,
	// with no Route of its own) is not refused either.
	out, err = applyWith("p40", strict, "example.com/p40:v1", "sluice.dev/gates")
	if err != nil || strings.Contains(out, "Warning: sluice") {
		t.Fatalf("strict namespace, a valid policy: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := stk.Serving.ServingV1().Configurations(strict).Get(ctx, "p40", metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			svc, _ := stk.Serving.ServingV1().Services(strict).Get(ctx, "p40", metav1.GetOptions{})
			t.Fatalf("Knative made no Configuration for the valid Service in the strict namespace (%v); its status: %+v", err, svc.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The worker refuses each rollout before any traffic moves.
	st := waitOutcome(t, c, svcTarget("p40"), "p40-00001", 60*time.Second)
	if st.Outcome != api.OutcomeFailed || !strings.Contains(st.Reason, gateTypo) {
		t.Fatalf("first rollout: %s: %s", st.Outcome, st.Reason)
	}
	waitClosed(t, c, "p40")
	if _, err := apply("p40", ns, "example.com/p40:v2"); err != nil {
		t.Fatal(err)
	}
	waitRevisionReady(t, "p40-00002")
	st = waitOutcome(t, c, svcTarget("p40"), "p40-00002", 60*time.Second)
	if st.Outcome != api.OutcomeFailed || !strings.Contains(st.Reason, gateTypo) {
		t.Fatalf("rollout of p40-00002: %s: %s", st.Outcome, st.Reason)
	}
	waitProgress(t, "p40-00002", "failed") // and no started or step before it
	time.Sleep(2 * time.Second)            // what Knative serves settles
	svc, err := stk.Serving.ServingV1().Services(ns).Get(ctx, "p40", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range append(svc.Spec.Traffic, svc.Status.Traffic...) {
		if tr.RevisionName == "p40-00002" && knative.Percent(tr) > 0 {
			t.Fatalf("the candidate of an invalid policy got traffic: spec %s, status %s",
				knative.FormatTraffic(svc.Spec.Traffic), knative.FormatTraffic(svc.Status.Traffic))
		}
	}
	if got := knative.FormatTraffic(svc.Spec.Traffic); got != "p40-00001=100%" {
		t.Fatalf("traffic: %s, want all of it on p40-00001 (pinned by the webhook as the template changed)", got)
	}
}
