package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/stack"
)

// TestFloorVerifiesAsSluiceDoes runs the floor loop on the local stack
// (Knative's own controller under it) for one Service: when it returns, the
// Service must pass sluice's own check for its last step — the status at the
// written generation shows the traffic and RoutesReady is True — or the
// floor would have measured less than sluice waits for.
func TestFloorVerifiesAsSluiceDoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tools, root, crds := stack.ForTest(ctx, t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rn, err := startRun(ctx, env{tools: tools, root: root, crds: crds, log: log}, stack.Options{Log: log, TemporalInMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rn.close(false)
	const name = "floor"
	svcs := rn.stk.Serving.ServingV1().Services(stack.Namespace)
	if _, err := svcs.Create(ctx, service(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitReady(rn.ready, []string{name}, "00001", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := floor(ctx, rn.stk, []string{name}, floorPlan{weights: []int64{30, 100}, hold: time.Second, ready: rn.ready, timeout: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live, _ := knative.LiveOf(svc)
	last := []servingv1.TrafficTarget{{RevisionName: name + "-00002", Percent: new(int64(100))}}
	if lacks := live.Lacks(knative.ObjectRef{Namespace: stack.Namespace, Kind: knative.KindService, Name: name}, last, svc.Generation); lacks != "" {
		t.Fatalf("the floor returned before sluice's check passed: %s", lacks)
	}
}
