package receiver

import (
	"context"
	"sync"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// fakeTemporal records the calls the receiver makes. Methods it does not
// override panic (the embedded client is nil): a test that reaches one has
// found a call the receiver should not make.
type fakeTemporal struct {
	client.Client
	mu       sync.Mutex
	calls    []string
	signalFn func(workflowID, signal string) error
	startErr error
	// gate, if set, holds every signal and signal-with-start until it is closed.
	gate     chan struct{}
	describe func(workflowID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	update   func(name string) (string, error)
	// runs answers the visibility listing of a target's rollouts.
	runs []*workflowpb.WorkflowExecutionInfo
	// started holds the options of every signal-with-start.
	started []client.StartWorkflowOptions
	// signals holds the argument of every signal, with-start or not.
	signals []any
}

func (f *fakeTemporal) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeTemporal) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// hold waits while the gate is set and open.
func (f *fakeTemporal) hold() {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (f *fakeTemporal) SignalWorkflow(_ context.Context, id, _ string, signal string, arg any) error {
	f.hold()
	f.record("signal " + signal + " " + id)
	f.mu.Lock()
	f.signals = append(f.signals, arg)
	f.mu.Unlock()
	if f.signalFn != nil {
		return f.signalFn(id, signal)
	}
	return nil
}

type fakeRun struct{ client.WorkflowRun }

func (fakeRun) GetRunID() string { return "run-1" }
func (fakeRun) GetID() string    { return "id" }

func (f *fakeTemporal) SignalWithStartWorkflow(_ context.Context, id, signal string, arg any, opts client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.hold()
	f.record("start " + id)
	f.mu.Lock()
	f.started = append(f.started, opts)
	f.signals = append(f.signals, arg)
	if err := f.startErr; err != nil {
		f.mu.Unlock()
		return nil, err
	}
	f.mu.Unlock()
	return fakeRun{}, nil
}

func (f *fakeTemporal) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.record("list")
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: f.runs}, nil
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.record("describe " + id)
	return f.describe(id)
}

type fakeUpdate struct {
	client.WorkflowUpdateHandle
	msg string
	err error
}

func (u fakeUpdate) Get(_ context.Context, into any) error {
	if u.err != nil {
		return u.err
	}
	*(into.(*string)) = u.msg
	return nil
}

func (f *fakeTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.record("update " + o.UpdateName + " " + o.WorkflowID)
	msg, err := f.update(o.UpdateName)
	return fakeUpdate{msg: msg, err: err}, nil
}
