package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/test/knativefake"
)

// TestConformanceToolReplaysRecordedEvents has the CloudEvents conformance
// tool (cmd/cloudevents) send every recorded ApiServerSource delivery to the
// receiver, in binary and in structured mode. The tool fails on any non-2xx
// answer; the rollout of the new Revision starts once.
func TestConformanceToolReplaysRecordedEvents(t *testing.T) {
	bin := toolBin(t, "SLUICE_CLOUDEVENTS_BIN", "the CloudEvents conformance tool")
	svc := knativefake.Service(ns, "hello", map[string]string{config.AnnotationSteps: "50,100", config.AnnotationHold: "1h"},
		knativefake.Target("hello-00001", 100, ""))
	svc.Status.LatestCreatedRevisionName = "hello-00002"
	s := startStack(t, []runtime.Object{svc, knativefake.Revision(ns, "hello", 1, true), knativefake.Revision(ns, "hello", 2, false)}...)
	url := s.startReceiver(t)
	for _, mode := range []string{"binary", "structured"} {
		file := filepath.Join("..", "..", "events", "testdata", "conformance", "apiserversource-"+mode+".yaml")
		out, err := exec.Command(bin, "invoke", url, "-f", file).CombinedOutput()
		if err != nil {
			t.Fatalf("cloudevents invoke (%s mode): %v\n%s", mode, err, out)
		}
	}
	var runs int
	eventually(t, 10*time.Second, "the rollout in the visibility store", func() bool {
		resp, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowId = 'rollout/default/service/hello'"})
		runs = len(resp.GetExecutions())
		return err == nil && runs > 0
	})
	if runs != 1 {
		t.Fatalf("the replayed events started %d rollouts, want 1", runs)
	}
	if st := s.status(); st.Candidate != "hello-00002" {
		t.Fatalf("candidate %s", st.Candidate)
	}
}
