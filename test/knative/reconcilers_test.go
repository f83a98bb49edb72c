package knative

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/knative"
)

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
}

// Knative's own Service reconciler makes a Configuration, a Revision and a
// Route for a Service, and reverts a direct edit of the Route it owns — which
// is why sluice writes a Service's traffic on the Service (Service mode),
// never on its Route. Observed here, not assumed.
func TestServiceReconcilerOwnsItsRoute(t *testing.T) {
	ctx := context.Background()
	svc := service("owned", traffic(latest(100, "")))
	if _, err := kn.ServingV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Configuration, Revision and Route", func() error {
		if _, err := kn.ServingV1().Configurations("default").Get(ctx, "owned", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err := kn.ServingV1().Revisions("default").Get(ctx, "owned-00001", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := kn.ServingV1().Routes("default").Get(ctx, "owned", metav1.GetOptions{})
		return err
	})
	edit, _ := json.Marshal(map[string]any{"spec": map[string]any{"traffic": []servingv1.TrafficTarget{named("owned-00001", 100, "edited")}}})
	edited, err := kn.ServingV1().Routes("default").Patch(ctx, "owned", types.MergePatchType, edit, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := knative.FormatTraffic(edited.Spec.Traffic); got != "owned-00001=100% (tag edited)" {
		t.Fatalf("the edit did not land: %s", got)
	}
	eventually(t, 30*time.Second, "Knative to revert the Route edit", func() error {
		rt, err := kn.ServingV1().Routes("default").Get(ctx, "owned", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := knative.FormatTraffic(rt.Spec.Traffic); got != "latest(owned)=100%" {
			return errorf("Route traffic " + got)
		}
		return nil
	})
}

type errorf string

func (e errorf) Error() string { return string(e) }
