// Package control is the client side of sluice's rollouts: start one, read
// its status, send it commands. The CLI uses it today; the receiver and
// operator tooling build on it.
package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows"
)

// Client starts and steers rollouts through Temporal.
type Client struct {
	Temporal  client.Client
	TaskQueue string
	// Cluster, when several clusters share the Temporal namespace, is the
	// cluster of every target that names none (see knative.TargetRef).
	Cluster string
	// Identity is recorded with every command: who sent it.
	Identity string
}

// ErrNoRollout means the target has no rollout, running or finished, in Temporal.
var ErrNoRollout = errors.New("no rollout found")

// ParseTarget reads a target as the CLI takes it: NAME (a Service),
// service/NAME or configuration/NAME.
func ParseTarget(namespace, arg string) (knative.TargetRef, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		kind, name = "service", arg
	}
	t := knative.TargetRef{Namespace: namespace, Name: name}
	switch strings.ToLower(kind) {
	case "service", "services", "ksvc":
		t.Kind = knative.KindService
	case "configuration", "configurations", "config":
		t.Kind = knative.KindConfiguration
	default:
		return t, fmt.Errorf("target %q: kind must be service or configuration, e.g. service/hello", arg)
	}
	if name == "" || namespace == "" {
		return t, fmt.Errorf("target %q: needs a name and a namespace", arg)
	}
	return t, nil
}

// Start begins a rollout of candidate on target, or hands the candidate to
// the rollout already running there (which then supersedes its candidate).
// It reports the run that received it.
//
// A person's start waits for a rollout that is ending to close (see
// awaitFinishing); the receiver calls Offer.
func (c *Client) Start(ctx context.Context, target knative.TargetRef, candidate, reason string) (string, error) {
	target = target.In(c.Cluster)
	if err := c.awaitFinishing(ctx, target); err != nil {
		return "", err
	}
	return c.Offer(ctx, StartRequest{Target: target, Offer: api.CandidateSignal{Revision: candidate, By: c.Identity}, Reason: reason})
}

// StartRequest offers a candidate, with what the caller already knows about
// the target, shown in the Temporal UI from the first moment if it starts a
// rollout.
type StartRequest struct {
	Target knative.TargetRef
	Offer  api.CandidateSignal
	Reason string
	// Stable, if known, makes the summary read "hello: hello-00001 → hello-00002".
	Stable string
	// Annotations, if known, are the target's; its sluice.dev/* policy goes into the details.
	Annotations map[string]string
}

// Offer hands a Revision to the target's rollout in one Temporal call, a
// signal-with-start: a running rollout decides what the Revision is to it
// (its own candidate's new state, a newer candidate, or an old one to
// ignore); with none running, a rollout of it starts. It reports the run
// that received it.
func (c *Client) Offer(ctx context.Context, r StartRequest) (string, error) {
	r.Target = r.Target.In(c.Cluster)
	target, candidate := r.Target, r.Offer.Revision
	details := fmt.Sprintf("Requested by %s.", c.Identity)
	if r.Reason != "" {
		details += " " + r.Reason
	}
	if r.Annotations != nil {
		policy := policyText(r.Annotations)
		if policy == "" {
			policy = "the worker's defaults"
		}
		details += "\n\nPolicy: " + policy
	}
	opts := client.StartWorkflowOptions{
		ID:                    api.RolloutID(target),
		TaskQueue:             c.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         api.StaticSummary(target, r.Stable, candidate),
		StaticDetails:         details,
		TypedSearchAttributes: workflows.StartAttributes(target, candidate),
	}
	run, err := c.Temporal.SignalWithStartWorkflow(ctx, opts.ID, api.SignalCandidate, r.Offer, opts, api.RolloutWorkflow,
		api.Input{Target: target, Candidate: candidate, RequestedBy: c.Identity})
	if err != nil {
		return "", fmt.Errorf("offer %s to the rollout of %s: %w", candidate, target, err)
	}
	return run.GetRunID(), nil
}

// finishWait bounds how long a start waits for a rollout that has its
// outcome to close: it answers its last updates and publishes its end first.
const finishWait = 30 * time.Second

// awaitFinishing waits while the target's rollout has an outcome but is
// still running. A candidate signalled to it then would be rolled out next
// only if newer (it guards against late events of older Revisions), so a
// start of an older Revision by hand — a rollback drill — would be lost
// while the CLI reported it started. Once the run has closed, the start
// begins a run of its own.
func (c *Client) awaitFinishing(ctx context.Context, target knative.TargetRef) error {
	deadline := time.Now().Add(finishWait)
	for {
		running, err := c.running(ctx, target)
		if err != nil || !running {
			return err
		}
		st, err := c.Status(ctx, target)
		if err != nil || st.Outcome == "" {
			// Running and not ending: the candidate goes to it.
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the rollout of %s on %s ended %s but has not closed after %s; try again", st.Candidate, target, st.Outcome, finishWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// policyText lists the sluice.dev/* annotations, sorted: the policy as written.
func policyText(ann map[string]string) string {
	var parts []string
	for k, v := range ann {
		if strings.HasPrefix(k, "sluice.dev/") && k != "sluice.dev/rollout" {
			parts = append(parts, strings.TrimPrefix(k, "sluice.dev/")+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Status reads the rollout's state through the status query. It works on a
// finished rollout too: Temporal replays it to answer.
func (c *Client) Status(ctx context.Context, target knative.TargetRef) (api.Status, error) {
	target = target.In(c.Cluster)
	v, err := c.Temporal.QueryWorkflow(ctx, api.RolloutID(target), "", api.QueryStatus)
	if err != nil {
		return api.Status{}, c.explain(err, target)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		return api.Status{}, fmt.Errorf("decode status of %s: %w", target, err)
	}
	st.At(time.Now())
	if !st.Phase.Done() {
		st.Pending = c.pending(ctx, target)
	}
	return st, nil
}

// pending lists the rollout's running activities, with their attempts and
// last errors, as Temporal's describe reports them. It is best effort: a
// status without it is still a status.
func (c *Client) pending(ctx context.Context, target knative.TargetRef) []api.PendingActivity {
	d, err := c.Temporal.DescribeWorkflowExecution(ctx, api.RolloutID(target), "")
	if err != nil {
		return nil
	}
	var out []api.PendingActivity
	for _, p := range d.GetPendingActivities() {
		out = append(out, api.PendingActivity{
			Activity: p.GetActivityType().GetName(), Attempt: p.GetAttempt(), LastError: p.GetLastFailure().GetMessage(),
		})
	}
	return out
}

// Send delivers a command as an update and waits for the workflow's answer.
// A command the rollout rejects returns a *RejectedError with the reason.
func (c *Client) Send(ctx context.Context, target knative.TargetRef, command, reason string) (string, error) {
	return c.SendAs(ctx, target, command, api.Command{By: c.Identity, Reason: reason}, "")
}

// SendAs is Send on behalf of cmd.By, who was authenticated elsewhere (a
// command asked on the Rollout resource). A non-empty updateID makes a
// repeated delivery of the same command act once.
func (c *Client) SendAs(ctx context.Context, target knative.TargetRef, command string, cmd api.Command, updateID string) (string, error) {
	target = target.In(c.Cluster)
	h, err := c.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   api.RolloutID(target),
		UpdateID:     updateID,
		UpdateName:   command,
		Args:         []any{cmd},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return "", c.explain(err, target)
	}
	var msg string
	if err := h.Get(ctx, &msg); err != nil {
		return "", c.explain(err, target)
	}
	return msg, nil
}

// Signal delivers a command without waiting: the rollout validates it when
// it arrives and records a rejection in its command history.
func (c *Client) Signal(ctx context.Context, target knative.TargetRef, command, reason string) error {
	target = target.In(c.Cluster)
	err := c.Temporal.SignalWorkflow(ctx, api.RolloutID(target), "", command, api.Command{By: c.Identity, Reason: reason})
	return c.explain(err, target)
}

// Tell signals the target's running rollout with a message it acts on by
// itself (a candidate's state, a hint that the target was deleted). The
// error wraps Temporal's: *serviceerror.NotFound means no rollout runs.
func (c *Client) Tell(ctx context.Context, target knative.TargetRef, signal string, payload any) error {
	target = target.In(c.Cluster)
	if err := c.Temporal.SignalWorkflow(ctx, api.RolloutID(target), "", signal, payload); err != nil {
		return fmt.Errorf("signal %s to the rollout of %s: %w", signal, target, err)
	}
	return nil
}

// Wait blocks until the rollout ends (following continue-as-new) and returns its result.
func (c *Client) Wait(ctx context.Context, target knative.TargetRef) (api.Result, error) {
	target = target.In(c.Cluster)
	var res api.Result
	err := c.Temporal.GetWorkflow(ctx, api.RolloutID(target), "").Get(ctx, &res)
	return res, c.explain(err, target)
}

// RejectedError is a command the rollout refused, with its reason.
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return e.Reason }

func (c *Client) explain(err error, target knative.TargetRef) error {
	if err == nil {
		return nil
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) && strings.Contains(notFound.Error(), "completed") {
		return &RejectedError{Reason: fmt.Sprintf("the rollout on %s has finished; `sluice status` shows how it ended", target)}
	}
	if errors.As(err, &notFound) {
		return fmt.Errorf("%w for %s (workflow %s)", ErrNoRollout, target, api.RolloutID(target))
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &RejectedError{Reason: appErr.Message()}
	}
	return fmt.Errorf("%s: %w", target, err)
}

// Setup registers sluice's search attributes in the Temporal namespace. It
// is idempotent: attributes already there are left alone, so it is safe to
// run on every deploy.
func (c *Client) Setup(ctx context.Context, namespace string) ([]string, error) {
	have, err := c.Temporal.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of Temporal namespace %s: %w", namespace, err)
	}
	want := map[string]enumspb.IndexedValueType{}
	for name, typ := range api.SearchAttributes() {
		if _, ok := have.CustomAttributes[name]; ok {
			continue
		}
		want[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
		if typ == "Int" {
			want[name] = enumspb.INDEXED_VALUE_TYPE_INT
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	if _, err := c.Temporal.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: want,
	}); err != nil {
		return nil, fmt.Errorf("add search attributes to Temporal namespace %s: %w", namespace, err)
	}
	added := make([]string, 0, len(want))
	for n := range want {
		added = append(added, n)
	}
	sort.Strings(added)
	return added, nil
}

// Pollers counts the workers Temporal has seen polling the client's task
// queue recently: none means no command or query can be answered.
func (c *Client) Pollers(ctx context.Context, taskQueue string) (int, error) {
	ws, err := c.Workers(ctx, taskQueue)
	return len(ws), err
}

// Workers lists the identities of the workers Temporal has seen polling
// the task queue recently, sorted: each names its build (version.Identity).
func (c *Client) Workers(ctx context.Context, taskQueue string) ([]string, error) {
	resp, err := c.Temporal.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return nil, fmt.Errorf("describe task queue %s: %w", taskQueue, err)
	}
	var out []string
	for _, p := range resp.GetPollers() {
		out = append(out, p.GetIdentity())
	}
	sort.Strings(out)
	return out, nil
}
