package workflows

import (
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// state is everything a rollout knows: every decision it has made, carried
// whole through continue-as-new. It is private; what a reader sees is
// api.Status, built from it by view.
type state struct {
	// Wave is this rollout's part in a wave plan; nil without one.
	Wave          *waveState        `json:"wave,omitempty"`
	Target        knative.TargetRef `json:"target"`
	Object        knative.ObjectRef `json:"object"`
	Configuration string            `json:"configuration,omitempty"`
	// Policy is the target's policy as resolved; its Steps are the plan.
	Policy config.Policy `json:"policy"`
	Phase  api.Phase     `json:"phase"`

	Candidate           string `json:"candidate"`
	CandidateGeneration int64  `json:"candidateGeneration,omitempty"`
	CandidateReady      bool   `json:"candidateReady"`
	Stable              string `json:"stable,omitempty"`

	// Original is the list a rollback restores: the exact traffic list
	// before sluice's first write or, once an operator resumed a rollout
	// whose traffic someone changed, the list they left with the
	// candidate's share back on the stable Revision.
	Original []servingv1.TrafficTarget `json:"original,omitempty"`
	// Baseline is Original with latestRevision targets pinned to Stable: the
	// list every step is computed from.
	Baseline []servingv1.TrafficTarget `json:"baseline,omitempty"`
	// Live is what sluice last wrote, or read before writing: what it expects
	// to find on the object next time.
	Live []servingv1.TrafficTarget `json:"live,omitempty"`
	// Weight is the candidate's current share of the stable traffic, in percent.
	Weight int64 `json:"weight"`

	// Step indexes Policy.Steps; Runs says how each step went.
	Step     int       `json:"step"`
	StepRuns []stepRun `json:"stepRuns"`

	StartedAt     time.Time `json:"startedAt"`
	ReadyDeadline time.Time `json:"readyDeadline"`
	Deadline      time.Time `json:"deadline"`
	HoldUntil     time.Time `json:"holdUntil,omitzero"`

	// Pause is set while the rollout waits for a person.
	Pause *pause `json:"pause,omitempty"`
	// Rebase makes the next step start from the live traffic: set when an
	// operator resumes after drift.
	Rebase bool `json:"rebase,omitempty"`

	PromoteRequested bool         `json:"promoteRequested,omitempty"`
	PromoteFull      bool         `json:"promoteFull,omitempty"`
	Abort            *api.Command `json:"abort,omitempty"`
	// PendingCandidate is a newer Revision waiting to supersede Candidate.
	PendingCandidate string `json:"pendingCandidate,omitempty"`
	// Told is the candidate's readiness as its Revision event told it, if
	// one did; ReadinessFrom says what the rollout acted on: the event or
	// its own watch of the Revision, whichever came first.
	Told          *api.CandidateSignal `json:"told,omitempty"`
	ReadinessFrom string               `json:"readinessFrom,omitempty"`
	// DeleteHints counts delete hints, DeleteChecked those already checked.
	DeleteHints   int `json:"deleteHints,omitempty"`
	DeleteChecked int `json:"deleteChecked,omitempty"`

	// RolloutID identifies this rollout of this candidate in progress event
	// IDs; Seq numbers its events.
	RolloutID     string `json:"rolloutId,omitempty"`
	Seq           int    `json:"seq,omitempty"`
	EventsEnabled bool   `json:"eventsEnabled,omitempty"`

	// Analysis is set when the policy has checks or webhooks.
	Analysis *analysisState `json:"analysis,omitempty"`
	// Capacity is set when the policy stages pods.
	Capacity *capacityState `json:"capacity,omitempty"`

	Commands []api.CommandRecord `json:"commands,omitempty"`
	// Undo is set on a run that undoes, with who asked and why: its
	// candidate is the Revision to go back to (resolved from the target's
	// history when not named).
	Undo *api.Command `json:"undo,omitempty"`
	// ReloadAnalysis: the operator asked to read the analysis template again.
	ReloadAnalysis bool `json:"reloadAnalysis,omitempty"`
	// Preview is the candidate's preview tag, once its status shows it.
	Preview *previewState `json:"preview,omitempty"`
	// Shortcut says why the plan is one write to 100% (api.Status.Shortcut).
	Shortcut   string   `json:"shortcut,omitempty"`
	Superseded []string `json:"superseded,omitempty"`

	// Ending is the outcome a running rollback will end with; api.Outcome is
	// set only once the rollout has ended.
	Ending  api.Outcome `json:"ending,omitempty"`
	Outcome api.Outcome `json:"outcome,omitempty"`
	Reason  string      `json:"reason,omitempty"`
	EndedAt time.Time   `json:"endedAt,omitzero"`

	// Runs counts the runs this rollout took through continue-as-new.
	Runs int `json:"runs"`
}

// stepRun is what happened at one step of the plan.
type stepRun struct {
	GatePassed bool `json:"gatePassed,omitempty"`
	// Skipped is set for a step the candidate's live share was already
	// past when the rollout started or rebased.
	Skipped   bool      `json:"skipped,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
}

// pauseCause is what paused a rollout, which decides what resuming does.
type pauseCause string

const (
	pausedByCommand  pauseCause = "command"
	pausedByDrift    pauseCause = "drift"    // resuming rebases on the live traffic
	pausedByAnalysis pauseCause = "analysis" // resuming forgives the failed checks
	// pausedByFinalRound: a step's closing round paused; resuming also
	// lets the step end.
	pausedByFinalRound pauseCause = "analysis-final"
	// pausedByError: a write the API server refused, or a read that failed
	// where the rollout cannot go on without it.
	pausedByError pauseCause = "error"
)

// pause is why a rollout waits for a person, and what resuming restores.
type pause struct {
	Cause  pauseCause `json:"cause"`
	Reason string     `json:"reason"`
	// HoldLeft is the hold's time left when it paused: a hold does not
	// run while paused.
	HoldLeft time.Duration `json:"holdLeft,omitempty"`
}

// paused reports whether the rollout waits for a person.
func (s *state) paused() bool { return s.Pause != nil }

// pauseFor pauses the rollout, freezing the time its hold has left.
func (s *state) pauseFor(cause pauseCause, reason string, now time.Time) {
	p := &pause{Cause: cause, Reason: reason}
	if s.Phase == api.PhaseHolding {
		p.HoldLeft = max(s.HoldUntil.Sub(now), 0)
	}
	s.Pause = p
}

// stepPlan is step i of the plan with how it went.
func (s *state) stepPlan(i int) api.StepStatus {
	p := s.Policy.Steps[i]
	v := api.StepStatus{Weight: p.Weight, Hold: api.Duration(p.Hold), Gate: p.Gate}
	if i < len(s.StepRuns) {
		run := s.StepRuns[i]
		v.GatePassed, v.Skipped, v.StartedAt, v.EndedAt = run.GatePassed, run.Skipped, run.StartedAt, run.EndedAt
	}
	return v
}

// view builds the api.Status of a rollout as of now: the one place that
// decides what the rollout shows.
func view(st *state, now time.Time) api.Status {
	v := api.Status{
		Target: st.Target, Object: st.Object, Configuration: st.Configuration, Policy: st.Policy,
		Phase: st.Phase, Shown: st.Phase, Paused: st.paused(),
		Candidate: st.Candidate, CandidateGeneration: st.CandidateGeneration, CandidateReady: st.CandidateReady,
		ReadinessFrom: st.ReadinessFrom, Told: st.Told, Stable: st.Stable, PendingCandidate: st.PendingCandidate, Superseded: st.Superseded,
		Original: st.Original, Baseline: st.Baseline, Live: st.Live, Weight: st.Weight,
		StepCount: len(st.Policy.Steps),
		StartedAt: st.StartedAt, ReadyDeadline: st.ReadyDeadline, Deadline: st.Deadline, HoldUntil: st.HoldUntil,
		Analysis: st.Analysis.view(), Commands: st.Commands, Wave: st.Wave.view(), Shortcut: st.Shortcut,
		Preview: st.Preview.view(),
		Ending:  st.Ending, Outcome: st.Outcome, Reason: st.Reason, EndedAt: st.EndedAt, Runs: st.Runs,
	}
	if p := st.Pause; p != nil {
		v.Shown, v.PauseReason, v.Drifted = api.PhasePaused, p.Reason, p.Cause == pausedByDrift
	}
	started := st.Step < len(st.StepRuns) && !st.StepRuns[st.Step].StartedAt.IsZero()
	switch {
	case st.Phase == api.PhaseHolding, st.Phase == api.PhaseGate, st.Phase == api.PhaseStepping, st.Weight > 0, started:
		v.StepNumber = st.Step + 1
	}
	v.Capacity = st.Capacity.view()
	v.Steps = make([]api.StepStatus, len(st.Policy.Steps))
	for i := range v.Steps {
		v.Steps[i] = st.stepPlan(i)
	}
	if st.Pause != nil && st.Phase == api.PhaseHolding {
		v.HoldLeftAt = api.Duration(st.Pause.HoldLeft)
	}
	v.At(now)
	return v
}
