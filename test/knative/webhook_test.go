package knative

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/knative"
)

func latest(p int64, tag string) servingv1.TrafficTarget {
	t := true
	return servingv1.TrafficTarget{LatestRevision: &t, Percent: new(int64(p)), Tag: tag}
}

func named(rev string, p int64, tag string) servingv1.TrafficTarget {
	return servingv1.TrafficTarget{RevisionName: rev, Percent: new(int64(p)), Tag: tag}
}

func traffic(ts ...servingv1.TrafficTarget) []servingv1.TrafficTarget { return ts }

func service(name string, tr []servingv1.TrafficTarget) *servingv1.Service {
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: "dev.local/sluice/hello:v1"}}
	svc.Spec.Traffic = tr
	return svc
}

func dryRunCreate(ctx context.Context, name string, tr []servingv1.TrafficTarget) error {
	_, err := kn.ServingV1().Services("default").Create(ctx, service(name, tr), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// refusedByKnative reports whether Knative's webhook answered the write.
func refusedByKnative(err error) bool {
	return err != nil && strings.Contains(err.Error(), `admission webhook "validation.webhook.serving.knative.dev" denied the request`)
}

// sluice checks every traffic list before it writes it with Knative's own
// validation, in the context it chooses (a Service's spec): on these lists,
// Knative's webhook and sluice must agree.
func TestSluiceAndKnativeAgreeOnTrafficLists(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		traffic []servingv1.TrafficTarget
	}{
		{"all on the latest Revision", traffic(latest(100, ""))},
		{"a split between two Revisions", traffic(named("hello-00001", 60, ""), named("hello-00002", 40, ""))},
		{"a tag at 0%", traffic(named("hello-00001", 100, ""), named("hello-00001", 0, "current"))},
		{"a latestRevision tag at 0%", traffic(named("hello-00001", 100, "prod"), latest(0, "latest"))},
		{"percents summing to 90", traffic(named("hello-00001", 90, ""))},
		{"percents summing to 110", traffic(named("hello-00001", 60, ""), named("hello-00002", 50, ""))},
		{"a negative percent", traffic(named("hello-00001", 110, ""), named("hello-00002", -10, ""))},
		{"a duplicate tag", traffic(named("hello-00001", 50, "a"), named("hello-00002", 50, "a"))},
		{"a tag that is no DNS label", traffic(named("hello-00001", 100, "Not_A_Label"))},
		{"latestRevision with a revisionName", traffic(servingv1.TrafficTarget{LatestRevision: new(true), RevisionName: "hello-00001", Percent: new(int64(100))})},
		{"latestRevision false without a revisionName", traffic(servingv1.TrafficTarget{LatestRevision: new(false), Percent: new(int64(100))})},
		{"a configurationName in a Service", traffic(servingv1.TrafficTarget{ConfigurationName: "hello", Percent: new(int64(100))})},
		{"a target that names nothing", traffic(servingv1.TrafficTarget{Percent: new(int64(100))})},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mine := knative.ValidateTraffic(knative.KindService, tt.traffic)
			theirs := dryRunCreate(ctx, "agree-"+string(rune('a'+i)), tt.traffic)
			if theirs != nil && !refusedByKnative(theirs) {
				t.Fatalf("dry run: %v", theirs)
			}
			if (mine == nil) != (theirs == nil) {
				t.Fatalf("%s: sluice says %v; Knative says %v", knative.FormatTraffic(tt.traffic), mine, theirs)
			}
		})
	}
}

// A Service created with no traffic: Knative's defaulting gives it all to
// the latest Revision, which is what sluice assumes of a Service whose
// traffic it reads empty.
func TestKnativeDefaultsNoTrafficToLatest(t *testing.T) {
	ctx := context.Background()
	svc, err := kn.ServingV1().Services("default").Create(ctx, service("defaulted", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := knative.FormatTraffic(svc.Spec.Traffic); got != "latest=100%" {
		t.Fatalf("defaulted traffic %s", got)
	}
}

// Knative refuses a traffic write because the Service's template breaks a
// cluster limit lowered after it was created (max-revision-timeout-seconds):
// sluice must tell that apart from a refusal of its list — the rollout
// pauses instead of rolling back into the same refusal.
func TestTemplateRefusalIsNotATrafficRefusal(t *testing.T) {
	ctx := context.Background()
	svc := service("limited", traffic(latest(100, "")))
	svc.Annotations = map[string]string{"sluice.dev/rollout": "enabled"}
	svc.Spec.Template.Spec.TimeoutSeconds = new(int64(500))
	if _, err := kn.ServingV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Knative: knative.Client{Serving: kn}}
	apply := func() error {
		cur, err := kn.ServingV1().Services("default").Get(ctx, "limited", metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = a.ApplyTraffic(ctx, activities.ApplyTrafficInput{
			SetTrafficInput: activities.SetTrafficInput{
				Object: knative.ObjectRef{Namespace: "default", Kind: knative.KindService, Name: "limited"},
				// A list that names no Revision: no Revision here is Ready
				// (no pods run), and the write must reach Knative.
				Expected: cur.Spec.Traffic, Desired: traffic(latest(100, ""), latest(0, "canary")),
			},
			VerifyFor: time.Second,
		})
		return err
	}
	setLimit(t, "400")
	t.Cleanup(func() { setLimit(t, "600") })
	// The webhook follows config-defaults through a watch: wait until it
	// refuses any update of the Service (a dry run changes nothing).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := kn.ServingV1().Services("default").Patch(ctx, "limited", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"probe":"x"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if refusedByKnative(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lowered limit never took effect: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	err2 := apply()
	var appErr *temporal.ApplicationError
	if !errors.As(err2, &appErr) || appErr.Type() != activities.ErrWriteRefused || !strings.Contains(appErr.Message(), "spec.template.spec.timeoutSeconds") {
		t.Fatalf("a write refused for the template: %v, want %s naming spec.template.spec.timeoutSeconds", err2, activities.ErrWriteRefused)
	}
	t.Logf("Knative's refusal, as sluice reports it: %s", appErr.Message())

	// The limit lifted, the same write goes through — re-read on the 409s
	// Knative's controller causes by writing the Service's status meanwhile.
	setLimit(t, "600")
	eventually(t, 20*time.Second, "the write to go through once the limit is lifted", apply)
}

func setLimit(t *testing.T, seconds string) {
	t.Helper()
	patch := []byte(`{"data":{"max-revision-timeout-seconds":"` + seconds + `"}}`)
	if _, err := stk.Kube().CoreV1().ConfigMaps("knative-serving").Patch(context.Background(), "config-defaults", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A traffic write is a compare-and-swap of the Service's spec, not of the
// whole object: Knative's writes of status and anyone's of metadata since
// the read do not make it conflict, a change of the spec does.
func TestTrafficPatchConflictsOnlyWithASpecChange(t *testing.T) {
	ctx := context.Background()
	c := knative.Client{Serving: kn}
	ref := knative.ObjectRef{Namespace: "default", Kind: knative.KindService, Name: "cas"}
	if _, err := kn.ServingV1().Services("default").Create(ctx, service("cas", traffic(latest(100, ""))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	read, err := c.ReadTraffic(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	// Knative's controller writes the new Service's status too: read again
	// when it got there first.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := kn.ServingV1().Services("default").Get(ctx, "cas", metav1.GetOptions{})
		if err != nil {
			return err
		}
		svc.Status.ObservedGeneration = svc.Generation
		_, err = kn.ServingV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := kn.ServingV1().Services("default").Patch(ctx, "cas", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"team":"payments"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	want := traffic(latest(100, ""), latest(0, "canary"))
	written, err := c.PatchTraffic(ctx, ref, read, want)
	if err != nil {
		t.Fatalf("a write after a status and a metadata write: %v", err)
	}
	if !knative.SameTraffic(written.Spec, want) || written.Generation != read.Generation+1 {
		t.Fatalf("wrote %s at generation %d (read %d)", knative.FormatTraffic(written.Spec), written.Generation, read.Generation)
	}
	// read is now a spec behind.
	_, err = c.PatchTraffic(ctx, ref, read, traffic(latest(100, "")))
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "spec changed since generation") {
		t.Fatalf("a write over a changed spec: %v, want a conflict", err)
	}
	now, err := c.ReadTraffic(ctx, ref)
	if err != nil || !knative.SameTraffic(now.Spec, want) {
		t.Fatalf("after the refused write: %s, %v", knative.FormatTraffic(now.Spec), err)
	}
}
