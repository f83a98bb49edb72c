package receiver

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/serviceerror"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

// sweepObjects is hello with a second Revision, not Ready yet, that no
// event told the receiver of: its Configuration names it as the newest.
func sweepObjects(latest string, annotations map[string]string) []runtime.Object {
	objs := helloObjects()
	for k, v := range annotations {
		objs[0].(*servingv1.Service).Annotations[k] = v
	}
	objs[1] = &servingv1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello", Generation: 2, Labels: map[string]string{"serving.knative.dev/service": "hello"}},
		Status:     servingv1.ConfigurationStatus{ConfigurationStatusFields: servingv1.ConfigurationStatusFields{LatestCreatedRevisionName: latest}},
	}
	// Knative labels a Service's Revisions with it.
	objs[4].(*servingv1.Revision).Labels["serving.knative.dev/service"] = "hello"
	return objs
}

func TestSweepOffersARevisionNoEventBrought(t *testing.T) {
	e := newEnv(t, sweepObjects("hello-00002", nil)...).withCache()
	if n := e.rcv.Sweep(context.Background()); n != 1 {
		t.Fatalf("offered %d, want 1", n)
	}
	if got := strings.Join(e.temporal.Calls(), "; "); got != "describe rollout/default/service/hello; start rollout/default/service/hello" {
		t.Fatalf("Temporal calls: %s", got)
	}
	offer, ok := e.temporal.signals[0].(api.CandidateSignal)
	if !ok || offer.Revision != "hello-00002" || offer.By != sweptBy {
		t.Fatalf("offer %+v", e.temporal.signals[0])
	}
	// Once offered, later sweeps leave it to its rollout.
	if n := e.rcv.Sweep(context.Background()); n != 0 || len(e.temporal.Calls()) != 2 {
		t.Fatalf("the second sweep offered %d; calls %v", n, e.temporal.Calls())
	}
}

func TestSweepLeavesHandledRevisionsAlone(t *testing.T) {
	for _, tc := range []struct {
		name        string
		latest      string
		annotations map[string]string
		candidate   string // of the target's latest rollout
		closed      bool   // that rollout has ended
		calls       string
	}{
		{name: "it serves", latest: "hello-00001", calls: ""},
		{name: "its rollout ended", latest: "hello-00002", annotations: map[string]string{config.AnnotationEnded: config.Ended("hello-00002", "RolledBack")}, calls: ""},
		{name: "a rollout has it", latest: "hello-00002", candidate: "hello-00002", calls: "describe rollout/default/service/hello"},
		// The visibility store still lists the run before it as the latest;
		// Temporal's own record has the one that just ended.
		{name: "its rollout has just closed", latest: "hello-00002", candidate: "hello-00002", closed: true, calls: "describe rollout/default/service/hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sweepObjects(tc.latest, tc.annotations)...).withCache()
			if tc.candidate != "" {
				status := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
				if tc.closed {
					status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
				}
				latest := runOf(t, tc.candidate, status)
				e.temporal.runs = []*workflowpb.WorkflowExecutionInfo{runOf(t, "hello-00001", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED)}
				e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
					return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: latest}, nil
				}
			}
			if n := e.rcv.Sweep(context.Background()); n != 0 {
				t.Fatalf("offered %d", n)
			}
			if got := strings.Join(e.temporal.Calls(), "; "); got != tc.calls {
				t.Fatalf("Temporal calls: %q, want %q", got, tc.calls)
			}
			if got := e.gets(); len(got) != 0 {
				t.Fatalf("API reads: %v", got)
			}
		})
	}
}

// runOf is a rollout run of candidate as Temporal describes or lists it.
func runOf(t *testing.T, candidate string, status enumspb.WorkflowExecutionStatus) *workflowpb.WorkflowExecutionInfo {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(candidate)
	if err != nil {
		t.Fatal(err)
	}
	return &workflowpb.WorkflowExecutionInfo{Status: status, SearchAttributes: &commonpb.SearchAttributes{
		IndexedFields: map[string]*commonpb.Payload{api.AttrCandidate.GetName(): p}}}
}

// While the receiver sweeps, a new candidate of a target its caches hold is
// answered before Temporal has its rollout, and offered in the background
// with its later states queued behind it, in order. An offer that fails
// every try is made again by the next sweep, which offers before it
// answers.
func TestNewCandidateAnsweredBeforeTemporalWhileSweeping(t *testing.T) {
	e := newEnv(t, sweepObjects("hello-00002", nil)...).withCache()
	e.rcv.BackgroundStarts = true
	gate := make(chan struct{})
	e.temporal.mu.Lock()
	e.temporal.gate = gate
	e.temporal.mu.Unlock()
	// In arrival order: the add, then the update to Ready.
	for _, ev := range []struct{ fixture, want string }{
		{"resource/02-revision-add.json", "offering hello-00002 (pending) to the rollout of default/service/hello"},
		{"resource/04-revision-update-ready-true.json", "offering hello-00002 (ready) to the rollout of default/service/hello"},
	} {
		if code, msg := e.replay(ev.fixture, nil); code != http.StatusAccepted || !strings.Contains(msg, ev.want) {
			t.Fatalf("%s, Temporal held: %d %s", ev.fixture, code, msg)
		}
	}
	if calls := e.temporal.Calls(); len(calls) != 0 {
		t.Fatalf("Temporal calls before the held one went through: %v", calls)
	}
	close(gate)
	e.rcv.background().wait()
	var states []string
	for _, s := range e.temporal.signals {
		states = append(states, s.(api.CandidateSignal).State.String())
	}
	if got := strings.Join(states, ","); got != "pending,ready" {
		t.Fatalf("offered states %s, want pending,ready in that order", got)
	}

	e = newEnv(t, sweepObjects("hello-00002", nil)...).withCache()
	e.rcv.BackgroundStarts = true
	e.temporal.mu.Lock()
	e.temporal.startErr = serviceerror.NewUnavailable("connection refused")
	e.temporal.mu.Unlock()
	if code, msg := e.replay("resource/02-revision-add.json", nil); code != http.StatusAccepted {
		t.Fatalf("the add, Temporal away: %d %s", code, msg)
	}
	e.rcv.background().wait()
	if n := testutil.ToFloat64(e.rcv.Metrics.laters.WithLabelValues("failed")); n != 1 || len(e.temporal.Calls()) != 3 {
		t.Fatalf("failed background offers %v after calls %v, want 1 after three tries", n, e.temporal.Calls())
	}
	e.temporal.mu.Lock()
	e.temporal.startErr = nil
	e.temporal.mu.Unlock()
	if n := e.rcv.Sweep(context.Background()); n != 1 {
		t.Fatalf("the sweep offered %d, want 1", n)
	}
	calls := e.temporal.Calls()
	offer, _ := e.temporal.signals[len(e.temporal.signals)-1].(api.CandidateSignal)
	if len(calls) != 5 || calls[4] != "start rollout/default/service/hello" || offer.By != sweptBy {
		t.Fatalf("after the sweep: calls %v, last offer %+v", calls, offer)
	}
}
