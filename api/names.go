package api

// Workflow types.
const (
	// RolloutWorkflow rolls one candidate Revision of a target out.
	RolloutWorkflow = "Rollout"
	// WaveWorkflow coordinates one release of a target across the clusters
	// of its wave plan.
	WaveWorkflow = "SluiceWave"
)

// Task queues.
const (
	// DefaultTaskQueue is where rollouts run unless the worker is told otherwise.
	DefaultTaskQueue = "sluice-rollouts"
	// WaveTaskQueue is the shared queue every cluster's worker also polls
	// for wave workflows: they only signal and wait, so any cluster runs them.
	WaveTaskQueue = "sluice-waves"
)

// ClusterTaskQueue is a cluster's default task queue: its worker polls it,
// and rollouts of its targets run there.
func ClusterTaskQueue(cluster string) string {
	if cluster == "" {
		return DefaultTaskQueue
	}
	return DefaultTaskQueue + "-" + cluster
}

// Command names, used both as update names (the caller learns at once whether
// the command was accepted) and as signal names (fire and forget). A rollout
// takes all of them; a wave takes pause, resume, abort and promote.
const (
	CommandPromote     = "promote"
	CommandPromoteFull = "promote-full"
	CommandPause       = "pause"
	CommandResume      = "resume"
	CommandAbort       = "abort"
	// CommandReloadAnalysis re-reads the analysis template a running
	// rollout names: its judgement follows the template from then on.
	CommandReloadAnalysis = "reload-analysis"
	// CommandUndo is not sent to a running rollout: it starts a run of its
	// own (api.Input.Undo), and is recorded among that run's commands.
	CommandUndo = "undo"
)

// Commands lists every command a rollout takes, in a fixed order.
func Commands() []string {
	return []string{CommandPromote, CommandPromoteFull, CommandPause, CommandResume, CommandAbort, CommandReloadAnalysis}
}

// Signals and queries.
const (
	// SignalCandidate offers a Revision to the target's rollout, with its
	// readiness as its event showed it; sent with signal-with-start, it also
	// starts the rollout when none is running. The rollout decides: its own
	// candidate's state is acted on (or its own watch, whichever comes first),
	// a newer Revision supersedes the candidate, an older one is ignored.
	SignalCandidate = "candidate"
	// SignalTargetDeleted says the target may have been deleted; the
	// workflow re-reads it before ending the rollout.
	SignalTargetDeleted = "target-deleted"
	// SignalWaveMember tells the wave about one of its rollouts.
	SignalWaveMember = "wave-member"
	// SignalWaveVerdict tells a rollout what its wave decided.
	SignalWaveVerdict = "wave"
	// QueryStatus returns a rollout's Status, or a wave's WaveStatus.
	QueryStatus = "status"
)

// Activity names, as the worker registers the methods of
// activities.Activities (a test holds the two lists equal). Callers name
// them to read a rollout's history.
const (
	ActivityResolveTarget        = "ResolveTarget"
	ActivityTargetExists         = "TargetExists"
	ActivityReadTraffic          = "ReadTraffic"
	ActivityAwaitTrafficChange   = "AwaitTrafficChange"
	ActivityApplyTraffic         = "ApplyTraffic"
	ActivityVerifyTraffic        = "VerifyTraffic"
	ActivityReadRevision         = "ReadRevision"
	ActivityAwaitRevision        = "AwaitRevision"
	ActivityMarkEnded            = "MarkEnded"
	ActivityRecordStable         = "RecordStable"
	ActivityReadAnalysisTemplate = "ReadAnalysisTemplate"
	ActivitySetScale             = "SetScale"
	ActivityAwaitPods            = "AwaitPods"
	ActivityAwaitReserve         = "AwaitReserve"
	ActivityMeasureCheck         = "MeasureCheck"
	ActivityCallWebhook          = "CallWebhook"
	ActivityEmitProgress         = "EmitProgress"
	ActivityJoinWave             = "JoinWave"
)

// Activities lists every activity name above.
func Activities() []string {
	return []string{
		ActivityResolveTarget, ActivityTargetExists, ActivityReadTraffic, ActivityAwaitTrafficChange,
		ActivityApplyTraffic, ActivityVerifyTraffic, ActivityReadRevision, ActivityAwaitRevision,
		ActivityMarkEnded, ActivitySetScale, ActivityAwaitPods, ActivityAwaitReserve,
		ActivityMeasureCheck, ActivityCallWebhook, ActivityEmitProgress, ActivityJoinWave,
		ActivityRecordStable, ActivityReadAnalysisTemplate,
	}
}

// Who a progress event names as the cause of a transition sluice made by
// itself ("by"): sluice, or sluice's analysis or drift watch for a pause.
const (
	BySluice   = "sluice"
	ByAnalysis = "sluice analysis"
	ByDrift    = "sluice drift"
)
