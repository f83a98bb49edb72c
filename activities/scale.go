package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sluicehq/sluice/knative"
)

// ScaleInput sets a Revision's scale bounds.
type ScaleInput struct {
	knative.RevisionRef
	Bounds knative.ScaleBounds `json:"bounds"`
	// Last, if set, is what sluice wrote before: bounds found to be
	// neither Last nor Bounds are someone else's, and are not overwritten.
	Last *knative.ScaleBounds `json:"last,omitempty"`
}

// SetScale writes a Revision's scale bounds (a capacity stage). It is
// idempotent: the same bounds again change nothing. A Revision that is gone
// needs no bounds; bounds Knative's webhook refuses are not retried.
func (a *Activities) SetScale(ctx context.Context, in ScaleInput) error {
	var err error
	if in.Last != nil {
		err = a.Knative.SetScaleChecked(ctx, in.RevisionRef, in.Bounds, *in.Last)
	} else {
		err = a.Knative.SetScale(ctx, in.RevisionRef, in.Bounds)
	}
	var drift *knative.ScaleDriftError
	switch {
	case errors.As(err, &drift):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrScaleDrift, err)
	case apierrors.IsNotFound(err):
		return nil
	case passingDenial(ctx, err):
		return retryDenial(err)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrWriteRefused, err)
	}
	return err
}

// AwaitPodsInput asks for a Revision's state once it has Want Ready pods
// (or, with AtMost, no more than Want), waiting at most For.
type AwaitPodsInput struct {
	knative.RevisionRef
	Want   int32         `json:"want"`
	AtMost bool          `json:"atMost,omitempty"`
	For    time.Duration `json:"for"`
	// Until, if set, ends the wait at that time, whatever For says: a
	// retry after a lost worker waits only what is left of the stage.
	Until time.Time `json:"until,omitzero"`
}

// waitFor is how long an attempt may wait: at most For, and no later than
// Until. A wait whose time is up still reads the Revision once.
func waitFor(d time.Duration, until time.Time) time.Duration {
	if until.IsZero() {
		return d
	}
	return max(min(d, time.Until(until)), time.Millisecond)
}

// AwaitPods answers with the Revision's state once it has in.Want Ready pods,
// has failed or is gone, or when in.For has passed. It heartbeats while it
// watches.
func (a *Activities) AwaitPods(ctx context.Context, in AwaitPodsInput) (knative.RevisionState, error) {
	defer keepAlive(ctx)()
	wctx, cancel := a.watchContext(ctx, waitFor(in.For, in.Until))
	defer cancel()
	st, err := a.Knative.AwaitPods(wctx, in.RevisionRef, in.Want, in.AtMost)
	if err := workerStopping(wctx); err != nil {
		return st, err
	}
	if st.Name == "" {
		return st, err // the first read failed
	}
	warnNoWatch(ctx, err)
	return st, nil
}

// AwaitReserveInput asks for a Revision's state once Knative has put it in
// reserve, waiting at most For.
type AwaitReserveInput struct {
	knative.RevisionRef
	For   time.Duration `json:"for"`
	Until time.Time     `json:"until,omitzero"`
}

// AwaitReserve answers with the Revision's state once Knative has put it in
// reserve, or it is gone, or when in.For has passed. It heartbeats while it
// watches.
func (a *Activities) AwaitReserve(ctx context.Context, in AwaitReserveInput) (knative.RevisionState, error) {
	defer keepAlive(ctx)()
	wctx, cancel := a.watchContext(ctx, waitFor(in.For, in.Until))
	defer cancel()
	st, err := a.Knative.AwaitReserve(wctx, in.RevisionRef)
	if err := workerStopping(wctx); err != nil {
		return st, err
	}
	if st.Name == "" {
		return st, err
	}
	warnNoWatch(ctx, err)
	return st, nil
}
