package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// ErrNothingToUndo: an undo named no Revision and the target's history
// names none to go back to, or the one named has the traffic already.
const ErrNothingToUndo = "NothingToUndo"

// undoTo picks the Revision an undo goes back to — the one named, or the
// last that had 100% of the traffic and still exists — and the Revision
// that has the traffic now, which the undo replaces.
func undoTo(t knative.TargetRef, target knative.Target, named string, history []config.Stint, revs map[string]*servingv1.Revision) (candidate, current string, err error) {
	current = knative.Stable(target.Live.Spec, "", revs)
	candidate = named
	if candidate == "" {
		for _, s := range history {
			if _, ok := revs[s.Revision]; ok && s.Revision != current {
				candidate = s.Revision
				break
			}
		}
	}
	switch {
	case candidate == "" && len(history) == 0:
		return "", "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s has no record of an earlier Revision with 100%% of its traffic (%s on %s is written when a rollout succeeds); name the Revision to go back to: sluice undo %s --to REVISION",
			t, config.AnnotationStableHistory, target.Object, t.Name), ErrNothingToUndo, nil)
	case candidate == "":
		return "", "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"none of the Revisions %s records as having had 100%% still exists (Knative's garbage collection removes old Revisions); name one with --to",
			t), ErrNothingToUndo, nil)
	case candidate == current:
		return "", "", temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s already serves %s's traffic; there is nothing to undo", candidate, t), ErrNothingToUndo, nil)
	}
	return candidate, current, nil
}

// revertOf finds, among the Revisions that had 100% of the traffic since
// since — the stable one, which has it now, and those in the history — one
// whose template the candidate's equals. Newest first.
func revertOf(cand *servingv1.Revision, stable string, history []config.Stint, revs map[string]*servingv1.Revision, since time.Time) *config.Stint {
	seen := []config.Stint{{Revision: stable}}
	for _, s := range history {
		if !s.Until.Before(since) && s.Revision != stable {
			seen = append(seen, s)
		}
	}
	for _, s := range seen {
		rev, ok := revs[s.Revision]
		if ok && s.Revision != cand.Name && knative.SameTemplate(cand, rev) {
			return &s
		}
	}
	return nil
}

// RecordStable writes on the traffic object that a Revision had 100% of
// the traffic until in.Until. The history is read first and rewritten
// whole; adding the same entry again changes nothing, so a retry is
// harmless.
func (a *Activities) RecordStable(ctx context.Context, in RecordInput) error {
	live, err := a.Knative.ReadTraffic(ctx, in.Object)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", in.Object, err)
	}
	history := config.WithStint(config.ParseStableHistory(live.Annotations[config.AnnotationStableHistory]),
		config.Stint{Revision: in.Revision, Until: in.Until})
	err = a.Knative.Annotate(ctx, in.Object, config.AnnotationStableHistory, config.FormatStableHistory(history))
	return annotateError(ctx, err, "record "+in.Revision+"'s time at 100%")
}
