package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
)

func containers(image string) []corev1.Container { return []corev1.Container{{Image: image}} }

func waitRevisionReady(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && r.Status.GetCondition(apis.ConditionReady).IsTrue() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("Revision %s not Ready", name)
}

// crashWorker kills the worker as a crash would and starts a new one after down.
func crashWorker(t *testing.T, down time.Duration) {
	t.Helper()
	stk.KillWorker()
	time.Sleep(down)
	if err := stk.StartWorker(context.Background()); err != nil {
		t.Fatal(err)
	}
}
