package activities

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// authzGrace is how long a refusal by the API server's authorizer is taken
// to pass. An API server that has just started answers every request with
// 403 until it has read its RBAC objects, and a worker that reaches it then
// (a single control plane, or a load balancer that does not wait for
// /readyz) must not stop a rollout for a permission it has. A permission
// that is really missing still stops it, once this has passed.
const authzGrace = 30 * time.Second

// passingDenial reports whether err is the authorizer's refusal ("User …
// cannot get resource …") within authzGrace of the activity's first
// attempt: retry it. An admission webhook's or policy's refusal is never
// passing: it says the same thing again.
func passingDenial(ctx context.Context, err error) bool {
	return authzDenial(err) && activity.IsActivity(ctx) && time.Since(activity.GetInfo(ctx).ScheduledTime) < authzGrace
}

// authzDenial reports whether err is the API server's authorizer refusing
// the caller: its message is the API server's own ("User %q cannot %s …"),
// whichever authorizer refused.
func authzDenial(err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, `User "`) && strings.Contains(msg, `" cannot `)
}

// retryDenial wraps a passing denial for a retry, saying why it is retried.
func retryDenial(err error) error {
	return fmt.Errorf("%w (retried for up to %s: an API server that has just started refuses until it has read its RBAC)", err, authzGrace)
}
