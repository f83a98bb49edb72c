package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/measure"
)

// maxRecent bounds the measurements kept in the state; the history keeps all.
const maxRecent = 40

// analysisState is what a rollout's analysis has measured and decided so
// far. It is carried through continue-as-new with api.AnalysisState's JSON,
// which is also how the status shows it; the rollout's analysis activities
// (analysis rounds, webhooks) live in this file beside it.
type analysisState api.AnalysisState

func newAnalysisState(an *config.Analysis) *analysisState {
	st := &analysisState{}
	for _, c := range an.Checks {
		st.Tallies = append(st.Tallies, analysis.Tally{Name: c.Name, Kind: checkKind(c), DryRun: c.DryRun,
			Limits: analysis.Limits{Failure: c.FailureLimit, ConsecutiveError: c.ConsecutiveErrorLimit, Inconclusive: c.InconclusiveLimit}})
	}
	for _, h := range an.Hooks(config.MomentHold) {
		st.Tallies = append(st.Tallies, analysis.Tally{Name: h.Name, Kind: analysis.KindWebhook, Limits: analysis.Limits{Failure: h.FailureLimit}})
	}
	if an.Comparisons() {
		st.Tallies = append(st.Tallies, analysis.Tally{Name: "score", Kind: analysis.KindScore})
	}
	return st
}

func checkKind(c config.Check) string {
	if c.Compare != nil {
		return analysis.KindCompare
	}
	return analysis.KindCheck
}

// analysing reports whether this rollout runs analysis.
func (r *rollout) analysing() bool {
	return r.st.Analysis != nil && r.st.Policy.Analysis != nil
}

// remember keeps a round's measurements, the newest maxRecent of all.
func (an *analysisState) remember(ms []analysis.Measurement) {
	an.Recent = append(an.Recent, ms...)
	if n := len(an.Recent) - maxRecent; n > 0 {
		an.Recent = append([]analysis.Measurement(nil), an.Recent[n:]...)
	}
}

// holdAnalysis runs the hold's analysis rounds: one every interval while the
// hold lasts, and a closing one before the step ends. It reports whether the
// step may end now; if not, it has waited, paused or started a rollback.
func (r *rollout) holdAnalysis(ctx workflow.Context, left time.Duration, summary string) bool {
	an := r.st.Analysis
	interval := r.st.Policy.Analysis.Interval
	step := r.st.Step + 1
	if left > 0 {
		if an.due(workflow.Now(ctx)) {
			an.schedule(workflow.Now(ctx), interval)
			if !r.analyze(ctx, false) {
				return false
			}
		}
		left = r.st.HoldUntil.Sub(workflow.Now(ctx))
		if r.st.PromoteRequested {
			left = 0 // promoted while measuring: go to the closing round
		}
		if left > 0 {
			wait := min(left, max(an.NextAt.Sub(workflow.Now(ctx)), time.Second))
			if due := r.startWatch(ctx, left); due > 0 {
				wait = min(wait, due)
			}
			r.awaitFor(ctx, wait, summary, func() bool { return r.st.PromoteRequested || r.st.PromoteFull })
			return false
		}
	}
	r.st.PromoteRequested = false
	if an.FinalStep != step {
		if !r.analyze(ctx, true) {
			return false
		}
		an.FinalStep = step
	}
	return true
}

// analyze runs one round: every check and hold webhook at once, then judges
// the tallies. It reports whether the rollout goes on.
func (r *rollout) analyze(ctx workflow.Context, final bool) bool {
	an := r.st.Analysis
	pol := r.st.Policy.Analysis
	vars := r.templateVars()
	ps := make([]pending, 0, len(an.Tallies))
	for _, c := range pol.Checks {
		ps = append(ps, pending{
			future: workflow.ExecuteActivity(checkOptions(ctx, "measure "+c.Name), a.MeasureCheck,
				measure.CheckInput{Check: c, Prometheus: pol.Prometheus, Vars: vars, Step: r.st.Step + 1}),
			lost: analysis.Measurement{Name: c.Name, Kind: checkKind(c), Result: analysis.Error, Step: r.st.Step + 1, Weight: r.st.Weight, DryRun: c.DryRun},
		})
	}
	for _, h := range pol.Hooks(config.MomentHold) {
		ps = append(ps, r.callHook(ctx, h))
	}
	ms := r.collect(ctx, ps)
	if pol.Comparisons() {
		ms = append(ms, r.score(ctx, ms))
	}
	an.tally(ms)
	r.report(ctx, ms)
	d := an.judge(final)
	switch d.Action {
	case analysis.Rollback:
		r.startRollback(api.OutcomeRolledBack, d.Reason)
		return false
	case analysis.Pause:
		cause := pausedByAnalysis
		if final {
			cause = pausedByFinalRound
		}
		r.st.pauseFor(cause, d.Reason, workflow.Now(ctx))
		r.emit(ctx, events.ProgressPaused, d.Reason, api.ByAnalysis)
		return false
	}
	return true
}

// pending is a check or webhook activity under way, and the measurement it
// counts as if the activity itself fails (a worker lost more often than its
// retries allow): an error for a check, a failure for a webhook.
type pending struct {
	future workflow.Future
	lost   analysis.Measurement
}

// collect waits for every activity, in order.
func (r *rollout) collect(ctx workflow.Context, ps []pending) []analysis.Measurement {
	ms := make([]analysis.Measurement, len(ps))
	for i, p := range ps {
		if err := p.future.Get(ctx, &ms[i]); err != nil {
			ms[i] = p.lost
			ms[i].Message, ms[i].At = errorMessage(err), workflow.Now(ctx)
		}
	}
	return ms
}

// report keeps a round's measurements and sends them as one progress event.
func (r *rollout) report(ctx workflow.Context, ms []analysis.Measurement) {
	r.st.Analysis.remember(ms)
	r.emitAnalysis(ctx, ms)
}

// score judges the round's comparisons (the first measurements, one per
// check in policy order) as one measurement.
func (r *rollout) score(ctx workflow.Context, ms []analysis.Measurement) analysis.Measurement {
	pol := r.st.Policy.Analysis
	var round []analysis.Scored
	for i, c := range pol.Checks {
		if c.Compare != nil {
			round = append(round, analysis.Scored{Measurement: ms[i], Weight: c.Weight, Critical: c.Critical})
		}
	}
	m := analysis.Score(round, pol.Score)
	m.Step, m.Weight, m.At = r.st.Step+1, r.st.Weight, workflow.Now(ctx)
	return m
}

// callHook starts one webhook call for the current moment of the rollout.
func (r *rollout) callHook(ctx workflow.Context, h config.Webhook) pending {
	call := r.st.Analysis.nextCall()
	v := view(&r.st, workflow.Now(ctx))
	step := v.StepNumber
	p := analysis.Payload{
		Name: h.Name, Moment: string(h.At), ID: fmt.Sprintf("%s/%s/%d", r.st.RolloutID, h.Name, call), Metadata: h.Metadata,
		Rollout: analysis.RolloutInfo{
			WorkflowID: api.RolloutID(v.Target), Namespace: v.Target.Namespace, Kind: v.Target.Kind, Name: v.Target.Name,
			Candidate: v.Candidate, Stable: v.Stable, Phase: string(v.Phase), Step: step, StepCount: v.StepCount,
			Weight: v.Weight, Outcome: string(v.Outcome), Reason: v.Reason,
		},
	}
	if pv := r.st.Preview; pv != nil {
		p.Preview = &analysis.PreviewInfo{Tag: pv.Tag, URL: pv.URL, Header: map[string]string{config.TagHeader: pv.Tag}}
	}
	return pending{
		future: workflow.ExecuteActivity(webhookOptions(ctx, h, "webhook "+h.Name+" ("+string(h.At)+")"), a.CallWebhook,
			measure.WebhookInput{Hook: h, Payload: p}),
		lost: analysis.Measurement{Name: h.Name, Kind: analysis.KindWebhook, Moment: string(h.At), Result: analysis.Failed, Step: step, Weight: v.Weight},
	}
}

// callHooks calls every hook of a moment at once and waits for the answers.
func (r *rollout) callHooks(ctx workflow.Context, m config.Moment) []analysis.Measurement {
	hooks := r.st.Policy.Analysis.Hooks(m)
	ps := make([]pending, len(hooks))
	for i, h := range hooks {
		ps[i] = r.callHook(ctx, h)
	}
	ms := r.collect(ctx, ps)
	r.report(ctx, ms)
	return ms
}

// firstFailed is the first measurement that did not pass, or nil.
func firstFailed(ms []analysis.Measurement) *analysis.Measurement {
	for i := range ms {
		if ms[i].Result != analysis.Passed {
			return &ms[i]
		}
	}
	return nil
}

// beforeStart calls the before-start hooks once the candidate is Ready. A
// failure rolls back before the candidate gets any traffic.
func (r *rollout) beforeStart(ctx workflow.Context) bool {
	ms := r.callHooks(ctx, config.MomentBeforeStart)
	r.st.Analysis.Started = true
	if f := firstFailed(ms); f != nil {
		r.startRollback(api.OutcomeRolledBack, "before-start "+f.Summary()+": "+f.Message)
		return false
	}
	return true
}

// gateHooks asks the gate hooks whether the candidate may be promoted to
// 100%. It reports whether all of them answered 2xx.
func (r *rollout) gateHooks(ctx workflow.Context) bool {
	return firstFailed(r.callHooks(ctx, config.MomentGate)) == nil
}

// endHooks calls the rollback hooks (if traffic went back to stable) and the
// after-end hooks. Their answers are recorded, not acted on: the rollout
// has already ended.
func (r *rollout) endHooks(ctx workflow.Context) {
	r.st.Analysis.Ended = true
	if r.st.Phase == api.PhaseRolledBack || r.st.Phase == api.PhaseAborted {
		r.callHooks(ctx, config.MomentRollback)
	}
	r.callHooks(ctx, config.MomentAfterEnd)
}

// forgive is called when a person resumes a pause the analysis made: its
// cause is accepted, and after a step's closing round the step may end.
func (an *analysisState) forgive(now time.Time, interval time.Duration, step int, final bool) {
	for i := range an.Tallies {
		an.Tallies[i].Forgive()
	}
	if final {
		an.FinalStep = step
	}
	an.schedule(now, interval)
}

// tally counts a round's measurements, one per tally in order.
func (an *analysisState) tally(ms []analysis.Measurement) {
	for i := range ms {
		an.Tallies[i].Record(ms[i])
	}
}

// judge ends a round: what the tallies say the rollout does now.
func (an *analysisState) judge(final bool) analysis.Decision {
	an.Rounds++
	return analysis.Judge(an.Tallies, final)
}

// due reports whether the hold's next round is due at now.
func (an *analysisState) due(now time.Time) bool { return !now.Before(an.NextAt) }

// schedule sets the next round an interval after now.
func (an *analysisState) schedule(now time.Time, interval time.Duration) {
	an.NextAt = now.Add(interval)
}

// nextCall numbers a webhook call, for its payload's ID.
func (an *analysisState) nextCall() int {
	an.Calls++
	return an.Calls
}

// view is the analysis as the status shows it.
func (an *analysisState) view() *api.AnalysisState { return (*api.AnalysisState)(an) }

func (r *rollout) templateVars() config.TemplateVars {
	st := &r.st
	v := config.TemplateVars{Namespace: st.Target.Namespace, Configuration: st.Configuration, Candidate: st.Candidate, Stable: st.Stable, Revision: st.Candidate, Weight: st.Weight}
	if st.Target.Kind == knative.KindService {
		v.Service = st.Target.Name
	}
	return v
}

// emitAnalysis sends a round's measurements as one progress event.
func (r *rollout) emitAnalysis(ctx workflow.Context, ms []analysis.Measurement) {
	if len(ms) == 0 {
		return
	}
	n := len(r.outbox)
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Summary()
	}
	r.emit(ctx, events.ProgressAnalysis, strings.Join(parts, "; "), "")
	if len(r.outbox) > n {
		r.outbox[len(r.outbox)-1].Data.Measurements = ms
	}
}
