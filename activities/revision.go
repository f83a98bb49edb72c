package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// ReadRevision reports a Revision's readiness. A missing Revision is reported,
// not returned as an error: the workflow decides what that means.
func (a *Activities) ReadRevision(ctx context.Context, ref knative.RevisionRef) (knative.RevisionState, error) {
	return a.Knative.ReadRevision(ctx, ref)
}

// AwaitRevision answers with the Revision's state once it is Ready, has
// failed, or is gone — watching it, so readiness is seen the moment Knative
// reports it — or, if none of that happens within in.For, with its state then.
func (a *Activities) AwaitRevision(ctx context.Context, in AwaitRevisionInput) (knative.RevisionState, error) {
	defer keepAlive(ctx)()
	wctx, cancel := a.watchContext(ctx, in.For)
	st, err := a.Knative.AwaitRevision(wctx, in.RevisionRef)
	stopping := workerStopping(wctx)
	cancel()
	if stopping != nil {
		return st, stopping
	}
	if st.Name == "" {
		return st, err // the first read failed
	}
	warnNoWatch(ctx, err)
	if (st.Ready || st.Failed || !st.Found) && in.Grace > 0 {
		// The event is on its way; if it is lost the answer comes late
		// by Grace, not never. The workflow stops waiting for this
		// activity as soon as the event arrives.
		gctx, cancel := a.watchContext(ctx, in.Grace)
		<-gctx.Done()
		cancel()
	}
	return st, nil
}

// MarkEnded records on the traffic object how the rollout of its candidate
// ended (config.AnnotationEnded), so a later event of a candidate that was
// rolled back or aborted starts no rollout again — the mark outlives
// Temporal's retention of the run. An object that is gone needs no mark.
func (a *Activities) MarkEnded(ctx context.Context, in MarkInput) error {
	err := a.Knative.Annotate(ctx, in.Object, config.AnnotationEnded, config.Ended(in.Revision, in.Outcome))
	return annotateError(ctx, err, "mark the rollout's outcome")
}

// annotateError sorts a failed annotation of the traffic object: one that
// is gone needs none, a refusal that retrying cannot change is final.
func annotateError(ctx context.Context, err error, what string) error {
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case passingDenial(ctx, err):
		return retryDenial(err)
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		return temporal.NewNonRetryableApplicationError(err.Error(), "MarkRefused", err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
