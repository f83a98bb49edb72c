package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// previewState is the candidate's preview tag once it is in the traffic
// object's status, and the URL the status gives it.
type previewState struct {
	Tag string `json:"tag"`
	URL string `json:"url,omitempty"`
}

// openPreview gives the Ready candidate its preview tag at 0% before any
// share (sluice.dev/preview) and waits until the traffic object's status
// shows it, with its URL: the before-start webhooks then reach the
// candidate alone there. It reports whether the rollout goes on; when not,
// it has decided what happens next (a write refused or never shown rolls
// back like any step's). A rollout with no preview, or one that has it
// already, goes on at once.
func (r *rollout) openPreview(ctx workflow.Context) bool {
	tag := r.st.Policy.Preview
	if tag == "" || r.st.Stable == "" || r.st.Preview != nil || r.st.Shortcut != "" {
		return true
	}
	for _, t := range r.st.Live {
		if t.Tag == tag {
			r.startRollback(api.OutcomeFailed, fmt.Sprintf("%s: the tag %q is taken by a target of %s's traffic (%s); choose another preview tag",
				config.AnnotationPreview, tag, r.st.Object, knative.FormatTraffic([]servingv1.TrafficTarget{t})))
			return false
		}
	}
	if !r.writeTraffic(ctx, r.withPreview(r.st.Live, tag), "preview "+r.st.Candidate+" at tag "+tag) {
		return false
	}
	var live activities.LiveTraffic
	if err := workflow.ExecuteActivity(readOptions(ctx, "read the URL of tag "+tag), a.ReadTraffic, r.st.Object).Get(ctx, &live); err != nil {
		r.startRollback(api.OutcomeRolledBack, "cannot read the preview tag's URL: "+errorMessage(err))
		return false
	}
	r.st.Preview = &previewState{Tag: tag, URL: live.URLs[tag]}
	return true
}

// planPreviewHold puts the preview's hold before the first step
// (sluice.dev/preview-hold): a step at 0%, whose hold runs the analysis's
// rounds — checks and hold webhooks, then a closing round — on the
// traffic sent to the tag, as any step's hold does. Its write changes
// nothing: the candidate has the tag and no share already.
func (r *rollout) planPreviewHold() {
	p := r.st.Policy
	if p.Preview == "" || p.PreviewHold <= 0 || r.st.Stable == "" || r.st.Shortcut != "" {
		return
	}
	r.st.Policy.Steps = append([]config.Step{{Weight: 0, Hold: p.PreviewHold}}, p.Steps...)
}

// withPreview is traffic with the candidate's preview target, at 0%, in
// place of any it had; with an empty tag, without it. Each write until
// the last step keeps the target, and every end removes it: the last step
// writes without it, a rollback or a supersede writes a list from before.
func (r *rollout) withPreview(traffic []servingv1.TrafficTarget, tag string) []servingv1.TrafficTarget {
	out := make([]servingv1.TrafficTarget, 0, len(traffic)+1)
	for _, t := range traffic {
		if r.st.Preview != nil && t.Tag == r.st.Preview.Tag && t.RevisionName == r.st.Candidate {
			continue
		}
		out = append(out, *t.DeepCopy())
	}
	if tag != "" {
		zero := int64(0)
		out = append(out, servingv1.TrafficTarget{Tag: tag, RevisionName: r.st.Candidate, Percent: &zero})
	}
	return out
}

// stepTraffic is a step's traffic list: the preview target, while the
// preview is open, is kept in every step's but the last.
func (r *rollout) stepTraffic(weight int64, last bool) []servingv1.TrafficTarget {
	desired := trafficAt(r.st.Baseline, r.st.Stable, r.st.Candidate, weight)
	if r.st.Preview == nil {
		return desired
	}
	tag := r.st.Preview.Tag
	if last {
		tag = ""
	}
	return r.withPreview(desired, tag)
}

// view is the preview as the status shows it.
func (p *previewState) view() *api.Preview {
	if p == nil {
		return nil
	}
	return &api.Preview{Tag: p.Tag, URL: p.URL, Header: config.TagHeader + ": " + p.Tag}
}
