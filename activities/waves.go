package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
)

// A wave workflow coordinates one release of a target across the clusters
// of its wave plan. Its messages live here, beside the activity that joins
// it, so the workflows package and this one share them.
const (
	// WaveWorkflowName is the wave workflow's type.
	WaveWorkflowName = "SluiceWave"
	// WaveTaskQueue is the shared queue every cluster's worker also polls
	// for wave workflows: they only signal and wait, so any cluster runs them.
	WaveTaskQueue = "sluice-waves"
	// SignalWaveMember tells the wave about one of its rollouts.
	SignalWaveMember = "wave-member"
	// SignalWaveVerdict tells a rollout what its wave decided.
	SignalWaveVerdict = "wave"
)

// Member events, in the order a rollout sends them.
const (
	MemberJoined  = "joined"
	MemberReached = "reached" // at 100%, waiting for the wave
	MemberEnded   = "ended"
)

// Verdicts a wave sends its rollouts.
const (
	VerdictRelease  = "release"  // go on with the steps
	VerdictStop     = "stop"     // end at 0%: an earlier wave failed
	VerdictDone     = "done"     // end: no need to wait at 100%
	VerdictRollback = "rollback" // roll back: a wave failed and the plan says so
)

// WaveStart starts a wave workflow.
type WaveStart struct {
	// Target is the target without a cluster: the same in every cluster.
	Target  knative.TargetRef `json:"target"`
	Release string            `json:"release"`
	Plan    config.Waves      `json:"plan"`
}

// WaveMember is one rollout's news for its wave.
type WaveMember struct {
	Cluster    string `json:"cluster"`
	WorkflowID string `json:"workflowID"`
	Candidate  string `json:"candidate"`
	Event      string `json:"event"`
	Outcome    string `json:"outcome,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// WaveVerdict is a wave's word to one of its rollouts.
type WaveVerdict struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
}

// WaveResult is how a wave ended.
type WaveResult struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// Wave outcomes.
const (
	WaveSucceeded = "Succeeded"
	WaveFailed    = "Failed"
	WaveAborted   = "Aborted"
)

// WaveID is the wave workflow of a release of a target.
func WaveID(t knative.TargetRef, release string) string {
	return "wave/" + t.Namespace + "/" + strings.ToLower(t.Kind) + "/" + t.Name + "/" + release
}

// ReleaseOf names a Revision's release: what makes "the same Revision" in
// every cluster, where Revision names may differ. Its template's
// sluice.dev/release if set, or else a digest of its containers' images.
func ReleaseOf(rev *servingv1.Revision) string {
	if r := rev.Annotations[config.AnnotationRelease]; r != "" {
		return r
	}
	var images []string
	for _, c := range rev.Spec.Containers {
		images = append(images, c.Name+"="+c.Image)
	}
	sort.Strings(images)
	sum := sha256.Sum256([]byte(strings.Join(images, "\n")))
	return hex.EncodeToString(sum[:6])
}

// JoinWaveInput joins the rollout Member to the wave WaveID, starting the
// wave if it is the first.
type JoinWaveInput struct {
	WaveID string     `json:"waveID"`
	Start  WaveStart  `json:"start"`
	Member WaveMember `json:"member"`
}

// JoinWaveResult is set when the wave had already ended: the rollout acts
// on its result at once (its signal would reach nobody).
type JoinWaveResult struct {
	Ended  bool       `json:"ended,omitempty"`
	Result WaveResult `json:"result,omitzero"`
}

// JoinWave signals the wave, starting it if no run of it ever did. A wave
// that has ended is not started again — a cluster joining after its wave
// failed must be stopped, not released — so its result is read instead.
func (a *Activities) JoinWave(ctx context.Context, in JoinWaveInput) (JoinWaveResult, error) {
	if a.Temporal == nil {
		return JoinWaveResult{}, errors.New("this worker has no Temporal client for wave plans")
	}
	_, err := a.Temporal.SignalWithStartWorkflow(ctx, in.WaveID, SignalWaveMember, in.Member, client.StartWorkflowOptions{
		ID: in.WaveID, TaskQueue: WaveTaskQueue, WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		StaticSummary: fmt.Sprintf("%s: release %s, %d waves", in.Start.Target, in.Start.Release, len(in.Start.Plan.Waves)),
	}, WaveWorkflowName, in.Start)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return JoinWaveResult{}, nil
	case !errors.As(err, &started):
		return JoinWaveResult{}, fmt.Errorf("join wave %s: %w", in.WaveID, err)
	}
	var res WaveResult
	if err := a.Temporal.GetWorkflow(ctx, in.WaveID, "").Get(ctx, &res); err != nil {
		return JoinWaveResult{}, fmt.Errorf("read how wave %s ended: %w", in.WaveID, err)
	}
	return JoinWaveResult{Ended: true, Result: res}, nil
}
