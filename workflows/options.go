package workflows

import (
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

type servingTraffic = servingv1.TrafficTarget

// readOptions suit a single API-server read: short, retried a few times with
// backoff, so a brief API-server outage is ridden out.
func readOptions(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: 5 * time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
}

// verifyOptions retry the status check quickly until the verify timeout: the
// retries cost no history events, and the first one usually succeeds.
func verifyOptions(ctx workflow.Context, timeout time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: timeout,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1.5, MaximumInterval: 3 * time.Second},
	})
}

// applyOptions suit ApplyTraffic: a write, then up to verifyFor of watching
// the status. It is idempotent, so retries after a lost answer are safe.
func applyOptions(ctx workflow.Context, verifyFor time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    verifyFor + 30*time.Second,
		ScheduleToCloseTimeout: 5 * time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
}

// awaitOptions suit AwaitRevision: it watches for up to wait, then answers.
func awaitOptions(ctx workflow.Context, wait time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    wait + 30*time.Second,
		ScheduleToCloseTimeout: wait + 5*time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
}

// watchOptions suit AwaitTrafficChange, which watches for up to span while a
// step holds. It heartbeats, so a lost worker is noticed in seconds and the
// watch starts again elsewhere; a cancelled watch is not waited for.
func watchOptions(ctx workflow.Context, span time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    span + 30*time.Second,
		ScheduleToCloseTimeout: span + 5*time.Minute,
		HeartbeatTimeout:       heartbeatTimeout,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
}
