package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/test/testkit"
)

// Going back on Knative: with a rollback window of an hour, a revert to
// the template that had 100% before the last rollout goes to 100% in one
// write; then `sluice undo`, after that rollout has ended, gives the
// Revision it replaced all the traffic again — in one write, tags kept —
// and marks the undone Revision ended. The audit log of Knative's API
// server says when each write was accepted.
func TestUndoAndRevertOnKnative(t *testing.T) {
	t.Parallel()
	c := ctl(t)
	firstRollout(t, c, "u1", map[string]string{"sluice.dev/steps": "25,50,100", "sluice.dev/hold": "1s", config.AnnotationRollbackWindow: "1h"})
	patchTraffic(t, "u1", []servingv1.TrafficTarget{
		{RevisionName: "u1-00001", Percent: new(int64(100))},
		{RevisionName: "u1-00001", Percent: new(int64(0)), Tag: "pinned"},
	})
	deploy(t, "u1", "example.com/u1:v2", nil, nil)
	if st := waitOutcome(t, c, svcTarget("u1"), "u1-00002", 60*time.Second); st.Outcome != api.OutcomeSucceeded || len(st.Steps) != 3 {
		t.Fatalf("rollout of u1-00002: %s (%s), %d steps", st.Outcome, st.Reason, len(st.Steps))
	}
	waitClosed(t, c, "u1")

	// The revert: u1-00003 runs u1-00001's template.
	deploy(t, "u1", "example.com/u1:v1", nil, nil)
	st := waitOutcome(t, c, svcTarget("u1"), "u1-00003", 60*time.Second)
	if st.Outcome != api.OutcomeSucceeded || len(st.Steps) != 1 || !strings.Contains(st.Shortcut, "same template as u1-00001, which had 100% of the traffic until") {
		t.Fatalf("revert: %s (%s), %d steps, shortcut %q", st.Outcome, st.Reason, len(st.Steps), st.Shortcut)
	}
	if w := shares(t, stk.AuditLog, "u1", "u1-00003", time.Time{}); len(w) != 1 || w[0].Percent != 100 {
		t.Fatalf("writes giving u1-00003 a share: %+v, want one, of 100%%", w)
	}
	waitProgress(t, "u1-00003", "started,step,succeeded")
	waitClosed(t, c, "u1")

	asked := time.Now()
	out, err := sluice(t, "undo", "u1", "--reason", "errors since the revert")
	if err != nil || !strings.Contains(out, "Succeeded: u1-00002 has 100% of the traffic that u1-00003 had; undo by e2e@test: errors since the revert") {
		t.Fatalf("sluice undo: %v\n%s", err, out)
	}
	w := shares(t, stk.AuditLog, "u1", "u1-00002", asked)
	if len(w) != 1 || w[0].Percent != 100 {
		t.Fatalf("writes giving u1-00002 a share after the undo: %+v, want one, of 100%%", w)
	}
	took := w[0].At.Sub(asked)
	t.Logf("undo: u1-00002 had 100%% %s after the command (from the audit log)", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("undo took %s from the command to the accepted write, want 2s at most", took)
	}
	if got := serviceTraffic(t, "u1"); got != "u1-00001=0% (tag pinned), u1-00002=100%" {
		t.Fatalf("traffic after the undo: %s", got)
	}
	svc := service(t, "u1")
	if mark := config.EndedOutcome(svc.Annotations[config.AnnotationEnded], "u1-00003"); mark != "Undone" {
		t.Errorf("u1-00003 marked %q (%s), want Undone", mark, svc.Annotations[config.AnnotationEnded])
	}
	if out, err := sluice(t, "status", "u1"); err != nil || !strings.Contains(out, "undo by e2e@test") {
		t.Errorf("sluice status after the undo: %v\n%s", err, out)
	}
}

// shares reads an API server's audit log for the accepted writes to
// Service name, since since, that gave revision a share.
func shares(t *testing.T, auditLog, name, revision string, since time.Time) []share {
	t.Helper()
	var out []share
	err := testkit.ScanAudit(auditLog, func(e *auditv1.Event) error {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "services" || e.ObjectRef.Name != name || e.ObjectRef.Subresource != "" ||
			e.ResponseStatus == nil || e.ResponseStatus.Code >= 300 || e.StageTimestamp.Time.Before(since) {
			return nil
		}
		traffic, _ := testkit.TrafficOf(e)
		for _, tt := range traffic {
			if tt.RevisionName == revision && tt.Percent != nil && *tt.Percent > 0 {
				out = append(out, share{At: e.StageTimestamp.Time, Percent: *tt.Percent})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// share is one accepted traffic write that gave a Revision Percent.
type share struct {
	At      time.Time
	Percent int64
}

// service reads Service name.
func service(t *testing.T, name string) *servingv1.Service {
	t.Helper()
	svc, err := stk.Serving.ServingV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
