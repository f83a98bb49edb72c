package e2e

// What the scenarios do to the stack's processes and read from them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/testkit"
	"github.com/sluicehq/sluice/workflows/control"
)

func containers(image string) []corev1.Container { return []corev1.Container{{Image: image}} }

func waitRevisionReady(t *testing.T, name string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, 200*time.Millisecond, "Revision "+name+" to be Ready", func() (bool, string) {
		r, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := r.Status.GetCondition(apis.ConditionReady)
		return c.IsTrue(), fmt.Sprintf("Ready condition %+v", c)
	})
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

// sendRevisionUpdate posts the live Revision, changed by edit, to the
// receiver as ApiServerSource's Resource-mode update event, and returns the
// answer.
func sendRevisionUpdate(t *testing.T, name string, edit func(*servingv1.Revision)) (int, string) {
	t.Helper()
	rev, err := stk.Serving.ServingV1().Revisions(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(rev)
	rev.APIVersion, rev.Kind = "serving.knative.dev/v1", "Revision"
	body, err := json.Marshal(rev)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, stk.ReceiverURL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Ce-Specversion": "1.0", "Ce-Type": events.TypeResourceUpdate, "Ce-Id": "e2e-" + name + "-" + rev.ResourceVersion,
		"Ce-Source": "https://kubernetes.default", "Ce-Subject": "/apis/serving.knative.dev/v1/namespaces/" + ns + "/revisions/" + name,
		"Content-Type": "application/json",
	} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(answer))
}

// rolloutRuns counts the runs Temporal has of a target's rollout workflow.
func rolloutRuns(t *testing.T, c *control.Client, target knative.TargetRef) int {
	t.Helper()
	resp, err := c.Temporal.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = '%s'", api.RolloutID(target)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.GetCount())
}
