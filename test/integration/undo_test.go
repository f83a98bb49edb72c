package integration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// TestUndoOnRealServer: a rollout that succeeds records its stable; the
// CLI's undo, after that rollout ended, gives it back 100% in one write and
// marks the undone Revision; an undo sent as a command event while a
// rollout runs aborts it. Both runs' histories are recorded for replay.
func TestUndoOnRealServer(t *testing.T) {
	objs := append(helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1s"}),
		knativefake.Revision(ns, "hello", 3, true))
	s := startStack(t, objs...)
	ctx := waitCtx(t)
	if out, code := s.cli("undo", "hello", "--reason", "nothing ran yet"); code == 0 || !strings.Contains(out, "--to REVISION") {
		t.Fatalf("undo with no history: exit %d\n%s", code, out)
	}
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	if res, err := s.ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("rollout: %+v, %v", res, err)
	}
	recordHistory(t, s.temporal, "rollout-succeeded.json")
	svc := s.service()
	if h := config.ParseStableHistory(svc.Annotations[config.AnnotationStableHistory]); len(h) != 1 || h[0].Revision != "hello-00001" {
		t.Fatalf("stable history after the rollout: %q", svc.Annotations[config.AnnotationStableHistory])
	}

	out, code := s.cli("undo", "hello", "--reason", "p99 doubled")
	t.Logf("sluice undo hello --reason \"p99 doubled\":\n%s", out)
	if code != 0 || !strings.Contains(out, "Succeeded: hello-00001 has 100% of the traffic that hello-00002 had; undo by cli@test: p99 doubled") {
		t.Fatalf("undo: exit %d\n%s", code, out)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00001=100%" {
		t.Fatalf("traffic after the undo: %s", got)
	}
	if n := s.k.WriteCount("hello"); n != 3 {
		t.Errorf("traffic writes = %d, want 3: the rollout's two steps and the undo's one", n)
	}
	svc = s.service()
	if mark := config.EndedOutcome(svc.Annotations[config.AnnotationEnded], "hello-00002"); mark != "Undone" {
		t.Errorf("hello-00002 marked %q, want Undone", mark)
	}
	st := s.status()
	if len(st.Commands) != 1 || st.Commands[0].Name != api.CommandUndo || st.Commands[0].By != "cli@test" || st.Commands[0].Reason != "p99 doubled" {
		t.Errorf("the undo's command record: %+v", st.Commands)
	}
	recordHistory(t, s.temporal, "rollout-undo.json")

	// While a rollout runs, an undo by command event aborts it.
	url := s.startReceiver(t)
	if _, err := s.ctl.Start(ctx, hello, "hello-00003", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the rollout of hello-00003 under way", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Candidate == "hello-00003" && st.Weight > 0 && !st.Phase.Done()
	})
	code, msg := postCommand(t, url, events.TypeUndo, `{"target":"hello","namespace":"default","revision":"hello-00002","reason":"x"}`, commandToken)
	if code != 409 || !strings.Contains(msg, "abort it first") {
		t.Fatalf("undo to another Revision than the running rollout's stable: %d %s", code, msg)
	}
	code, msg = postCommand(t, url, events.TypeUndo, `{"target":"hello","namespace":"default","requester":"pager","reason":"error budget gone"}`, commandToken)
	if code != 200 || !strings.Contains(msg, "undo aborted it") {
		t.Fatalf("undo of a running rollout: %d %s", code, msg)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeAborted || !strings.Contains(res.Reason, "undo: error budget gone") {
		t.Fatalf("the aborted rollout: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00001=100%" {
		t.Fatalf("traffic after the abort: %s", got)
	}
}

// TestRevertWithinTheWindowOnRealServer: a candidate of the template that
// had 100% an hour ago, with a rollback window of a day, goes to 100% in
// one write, and its status and progress events say why.
func TestRevertWithinTheWindowOnRealServer(t *testing.T) {
	objs := helloService(map[string]string{
		config.AnnotationSteps: "10,50,100", config.AnnotationHold: "1m", config.AnnotationRollbackWindow: "24h",
		config.AnnotationStableHistory: config.FormatStableHistory([]config.Stint{{Revision: "hello-00000", Until: time.Now().Add(-time.Hour)}}),
	})
	withImage(objs[1].(*servingv1.Revision), "example.com/hello:v1")
	withImage(objs[2].(*servingv1.Revision), "example.com/hello:v0")
	objs = append(objs, withImage(knativefake.Revision(ns, "hello", 0, true), "example.com/hello:v0"))
	s := startStack(t, objs...)
	ctx := waitCtx(t)
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded || !strings.Contains(res.Reason, "same template as hello-00000") {
		t.Fatalf("revert: %+v, %v", res, err)
	}
	if n := s.k.WriteCount("hello"); n != 1 {
		t.Errorf("traffic writes = %d, want 1", n)
	}
	if st := s.status(); st.StepCount != 1 || !strings.Contains(st.Shortcut, "within the rollback window of 24h0m0s") {
		t.Errorf("status: %d steps, shortcut %q", st.StepCount, st.Shortcut)
	}
	recordHistory(t, s.temporal, "rollout-revert.json")
}

func withImage(r *servingv1.Revision, image string) *servingv1.Revision {
	r.Spec.Containers = []corev1.Container{{Image: image}}
	return r
}
