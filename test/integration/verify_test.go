package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// The verify timeout on a real server, where an activity's timeout fires a
// few milliseconds before or after the workflow's own clock reaches the
// deadline (the test environment's clock jumps exactly to it and hid this):
// traffic written but never Ready in status must roll back, or — if the
// rollback cannot be verified either — end Failed with the reason. The
// stack's cleanup checks that no workflow task failed on the way.

func verifyTimeoutStack(t *testing.T) *stack {
	s := startStack(t, helloService(map[string]string{
		config.AnnotationSteps: "50,100", config.AnnotationHold: "1m", config.AnnotationVerifyTimeout: "15s",
	})...)
	// Status stops following spec: the 50% write never shows, as when the
	// networking layer is not ready.
	s.k.SetFrozen(true)
	if _, err := s.ctl.Start(context.Background(), hello, "hello-00002", "integration test"); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitCtx bounds a wait for the rollout's end: a stuck workflow fails the
// test instead of hanging it.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestVerifyTimeoutRollsBack(t *testing.T) {
	s := verifyTimeoutStack(t)
	ctx := waitCtx(t)
	var rolling api.Status
	eventually(t, time.Minute, "the verify timeout to start the rollback", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		rolling = st
		return err == nil && st.Phase == api.PhaseRollingBack
	})
	if rolling.Outcome != "" || rolling.Ending != api.OutcomeRolledBack {
		t.Fatalf("while rolling back: outcome %q ending %q; the outcome is set only once the rollback is done", rolling.Outcome, rolling.Ending)
	}
	// The network recovers: the rollback verifies.
	s.k.SetFrozen(false)
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeRolledBack ||
		!strings.Contains(res.Reason, "traffic did not show in Service default/hello status within the verify timeout of 15s") {
		t.Fatalf("result: %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=100%, hello-00001=0% (tag current)" {
		t.Fatalf("traffic after the rollback: %s", got)
	}
	recordHistory(t, s.temporal, "rollout-rollback.json")
}

func TestVerifyTimeoutOfTheRollbackFails(t *testing.T) {
	s := verifyTimeoutStack(t)
	res, err := s.ctl.Wait(waitCtx(t), hello)
	if err != nil || res.Outcome != api.OutcomeFailed || !strings.Contains(res.Reason, "rollback written but not verified") {
		t.Fatalf("result: %+v, %v", res, err)
	}
	// The query still answers: the workflow never got stuck.
	if st := s.status(); st.Phase != api.PhaseFailed {
		t.Fatalf("phase %s", st.Phase)
	}
}
