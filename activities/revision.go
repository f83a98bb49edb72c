package activities

import (
	"context"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

func revisionGeneration(r *servingv1.Revision) int64 {
	return knative.ReadRevisionLabels(r.Labels).Generation
}

// ReadRevision reports a Revision's readiness. A missing Revision is reported,
// not returned as an error: the workflow decides what that means.
func (a *Activities) ReadRevision(ctx context.Context, ref RevisionRef) (RevisionState, error) {
	r, err := a.Serving.ServingV1().Revisions(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RevisionState{Name: ref.Name}, nil
	}
	if err != nil {
		return RevisionState{}, fmt.Errorf("read Revision %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return revisionState(r), nil
}

// AwaitRevision answers with the Revision's state once it is Ready, has
// failed, or is gone — watching it, so readiness is seen the moment Knative
// reports it — or, if none of that happens within in.For, with its state then.
func (a *Activities) AwaitRevision(ctx context.Context, in AwaitRevisionInput) (RevisionState, error) {
	revs := a.Serving.ServingV1().Revisions(in.Namespace)
	r, err := revs.Get(ctx, in.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return RevisionState{Name: in.Name}, nil
	}
	if err != nil {
		return RevisionState{}, fmt.Errorf("read Revision %s/%s: %w", in.Namespace, in.Name, err)
	}
	st := revisionState(r)
	if st.Ready || st.Failed {
		return st, nil
	}
	wctx, cancel := a.watchContext(ctx, in.For)
	defer cancel()
	w := watcher{
		open: func(ctx context.Context, rv string) (watch.Interface, error) {
			return revs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", in.Name).String(), ResourceVersion: rv})
		},
		read: func(ctx context.Context) (runtime.Object, error) { return revs.Get(ctx, in.Name, metav1.GetOptions{}) },
		done: func(typ watch.EventType, obj runtime.Object) bool {
			if typ == watch.Deleted {
				st = RevisionState{Name: in.Name}
				return true
			}
			if rev, ok := obj.(*servingv1.Revision); ok && rev.Name == in.Name {
				st = revisionState(rev)
			}
			return st.Ready || st.Failed
		},
	}
	w.until(wctx, r.ResourceVersion)
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

func revisionState(r *servingv1.Revision) RevisionState {
	st := RevisionState{Name: r.Name, Found: true, Generation: revisionGeneration(r), Ready: r.IsReady(), Failed: r.IsFailed()}
	if c := r.Status.GetCondition(apis.ConditionReady); c != nil {
		st.Reason, st.Message = c.Reason, c.Message
	}
	return st
}

// MarkRevision labels a Revision with how its rollout ended
// (config.LabelOutcome), so a re-sent event of a candidate that was rolled
// back or aborted starts no rollout again — the mark lives as long as the
// Revision, longer than Temporal keeps the run. A missing Revision needs no
// mark.
func (a *Activities) MarkRevision(ctx context.Context, in MarkInput) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{config.LabelOutcome: in.Outcome}}})
	if err != nil {
		return fmt.Errorf("encode the outcome label: %w", err)
	}
	_, err = a.Serving.ServingV1().Revisions(in.Namespace).Patch(ctx, in.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("label Revision %s/%s %s=%s: %v", in.Namespace, in.Name, config.LabelOutcome, in.Outcome, err), "MarkRefused", err)
	}
	if err != nil {
		return fmt.Errorf("label Revision %s/%s %s=%s: %w", in.Namespace, in.Name, config.LabelOutcome, in.Outcome, err)
	}
	return nil
}
