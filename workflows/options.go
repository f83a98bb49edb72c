// Every activity's options, in one place: timeouts and retries are part of
// what a rollout promises (how long it rides out an outage), so they are read
// together.

package workflows

import (
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/measure"

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

// emitOptions suit sending one progress event: a sink that is down for
// minutes loses the event rather than hold the rollout's outbox.
func emitOptions(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    15 * time.Second,
		ScheduleToCloseTimeout: 2 * time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 20 * time.Second},
	})
}

// emitLocalOptions suit the quick try of a progress event from a local
// activity (progressLocal): the workflow task waits for it, so one attempt
// of at most 2 s; a sink that needs longer gets emitOptions' activity.
func emitLocalOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 2 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
}

// verifyOptions retry the status check quickly until the verify timeout: the
// retries cost no history events, and the first one usually succeeds.
func verifyOptions(ctx workflow.Context, timeout time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: timeout,
		HeartbeatTimeout:       heartbeatTimeout,
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
		HeartbeatTimeout:       heartbeatTimeout,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
}

// awaitOptions suit AwaitRevision: it watches for up to wait, then answers.
// Like every activity that waits (applyOptions, verifyOptions,
// watchOptions), it heartbeats, so a lost worker is noticed in seconds, not
// at the end of its start-to-close timeout.
func awaitOptions(ctx workflow.Context, wait time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		StartToCloseTimeout:    wait + 30*time.Second,
		ScheduleToCloseTimeout: wait + 5*time.Minute,
		HeartbeatTimeout:       heartbeatTimeout,
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

// heartbeatTimeout notices a lost worker within 20 s. Each beat is a call
// Temporal persists (and Temporal Cloud bills as an action), and a waiting
// activity first beats at half the timeout: a step's write whose status
// Knative shows within 10 s costs no beat. At 10 s (a first beat at 5 s),
// the writes of 100 rollouts at once on two cores, verified in 9.6 s at the
// median, cost the worker more heartbeat calls than activity completions.
const heartbeatTimeout = 10 * activities.HeartbeatEvery

// checkOptions suit one Prometheus query: a query error is a measurement,
// so only a lost worker retries.
func checkOptions(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:             summary,
		StartToCloseTimeout: measure.QueryTimeout + 15*time.Second,
		HeartbeatTimeout:    heartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
	})
}

// webhookOptions allow every attempt the hook's timeout plus its backoff.
func webhookOptions(ctx workflow.Context, h config.Webhook, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:             summary,
		StartToCloseTimeout: time.Duration(h.Retries+1)*(h.Timeout+measure.MaxBackoff) + 15*time.Second,
		HeartbeatTimeout:    heartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 2},
	})
}
