package integration

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
)

// A hand edit during a hold, on a real server: the hold's watch pauses the
// rollout within moments, and resume goes on from the edited list.
func TestDriftDuringHoldOnRealServer(t *testing.T) {
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "30,60,100", config.AnnotationHold: "1m"})...)
	ctx := waitCtx(t)
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the first hold", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Phase == api.PhaseHolding && st.Weight == 30
	})
	svc, _ := s.k.ServingV1().Services(ns).Get(ctx, "hello", metav1.GetOptions{})
	svc.Spec.Traffic = append(svc.Spec.Traffic, knativefake.Target("hello-00001", 0, "debug"))
	if _, err := s.k.ServingV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the pause", func() bool {
		st, err := s.ctl.Status(ctx, hello)
		return err == nil && st.Paused && strings.Contains(st.PauseReason, "during the hold")
	})
	if _, err := s.ctl.Send(ctx, hello, api.CommandResume, "keep the debug tag"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ctl.Send(ctx, hello, api.CommandPromoteFull, "done"); err != nil {
		t.Fatal(err)
	}
	res, err := s.ctl.Wait(ctx, hello)
	if err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v, %v", res, err)
	}
	if got := knative.FormatTraffic(s.liveTraffic()); got != "hello-00001=0% (tag current), hello-00001=0% (tag debug), hello-00002=100%" {
		t.Fatalf("final traffic %s", got)
	}
	recordHistory(t, s.temporal, "rollout-drift-resume.json")
}

// While a write is retried (the API server answering 500, as when
// Knative's webhook is down), status says which activity, which attempt
// and the last error.
func TestStatusShowsARetriedWrite(t *testing.T) {
	s := startStack(t, helloService(map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1s"})...)
	var down atomic.Bool
	down.Store(true)
	s.k.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "webhook.serving.knative.dev": connection refused`))
		}
		return false, nil, nil
	})
	ctx := waitCtx(t)
	if _, err := s.ctl.Start(ctx, hello, "hello-00002", ""); err != nil {
		t.Fatal(err)
	}
	var st api.Status
	eventually(t, 30*time.Second, "a retried write in status", func() bool {
		var err error
		st, err = s.ctl.Status(ctx, hello)
		return err == nil && len(st.Pending) > 0 && st.Pending[0].Attempt > 1
	})
	if p := st.Pending[0]; p.Activity != api.ActivityApplyTraffic || !strings.Contains(p.LastError, "failed calling webhook") {
		t.Fatalf("pending %+v", st.Pending)
	}
	if out, code := s.cli("status", "hello"); code != 0 || !strings.Contains(out, "Retrying:") || !strings.Contains(out, "failed calling webhook") {
		t.Fatalf("sluice status: exit %d\n%s", code, out)
	}
	down.Store(false)
	if res, err := s.ctl.Wait(ctx, hello); err != nil || res.Outcome != api.OutcomeSucceeded {
		t.Fatalf("result %+v, %v", res, err)
	}
}
