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

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
)

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
	WaveID string         `json:"waveID"`
	Start  api.WaveStart  `json:"start"`
	Member api.WaveMember `json:"member"`
}

// JoinWaveResult is set when the wave had already ended: the rollout acts
// on its result at once (its signal would reach nobody).
type JoinWaveResult struct {
	Ended  bool           `json:"ended,omitempty"`
	Result api.WaveResult `json:"result,omitzero"`
}

// JoinWave signals the wave, starting it if no run of it ever did. A wave
// that has ended is not started again — a cluster joining after its wave
// failed must be stopped, not released — so its result is read instead.
func (a *Activities) JoinWave(ctx context.Context, in JoinWaveInput) (JoinWaveResult, error) {
	if a.Temporal == nil {
		return JoinWaveResult{}, errors.New("this worker has no Temporal client for wave plans")
	}
	_, err := a.Temporal.SignalWithStartWorkflow(ctx, in.WaveID, api.SignalWaveMember, in.Member, client.StartWorkflowOptions{
		ID: in.WaveID, TaskQueue: api.WaveTaskQueue, WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		StaticSummary: fmt.Sprintf("%s: release %s, %d waves", in.Start.Target, in.Start.Release, len(in.Start.Plan.Waves)),
	}, api.WaveWorkflow, in.Start)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return JoinWaveResult{}, nil
	case !errors.As(err, &started):
		return JoinWaveResult{}, fmt.Errorf("join wave %s: %w", in.WaveID, err)
	}
	var res api.WaveResult
	if err := a.Temporal.GetWorkflow(ctx, in.WaveID, "").Get(ctx, &res); err != nil {
		return JoinWaveResult{}, fmt.Errorf("read how wave %s ended: %w", in.WaveID, err)
	}
	return JoinWaveResult{Ended: true, Result: res}, nil
}
