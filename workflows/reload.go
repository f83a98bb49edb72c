package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

// reloadAnalysis reads the rollout's analysis template again, as its
// operator asked (reload-analysis): from the next round on, the checks,
// webhooks and limits are the template's as it is now, with fresh tallies;
// what already happened (rounds, measurements, the before-start hooks, a
// passed gate) stays. A template that cannot be read pauses the rollout,
// saying why: resuming keeps the analysis it had.
func (r *rollout) reloadAnalysis(ctx workflow.Context) {
	r.st.ReloadAnalysis = false
	ref := *r.st.Policy.AnalysisTemplate
	var got activities.TemplateAnalysis
	err := workflow.ExecuteActivity(readOptions(ctx, "read "+ref.Kind()+" "+ref.Name+" again"), a.ReadAnalysisTemplate,
		activities.TemplateInput{Target: r.st.Target, Ref: ref}).Get(ctx, &got)
	if err != nil {
		r.st.pauseFor(pausedByError, "cannot read the analysis template again: "+errorMessage(err)+"; resume to go on with the analysis the rollout has", workflow.Now(ctx))
		return
	}
	r.st.Policy.Analysis = got.Analysis
	r.st.Policy.AnalysisTemplate.Version = got.Version
	r.st.Analysis.retally(got.Analysis)
	if r.st.Phase == api.PhaseHolding {
		r.st.Analysis.schedule(workflow.Now(ctx), got.Analysis.Interval)
	}
}

// retally gives the analysis the tallies of cfg, fresh, keeping what has
// happened: rounds, measurements, the hooks already called.
func (an *analysisState) retally(cfg *config.Analysis) {
	if an == nil {
		return
	}
	an.Tallies = newAnalysisState(cfg).Tallies
}
