package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/mirror"
)

// EnvRolloutResources turns the Rollout resources off ("off"); by default
// the worker writes them when the cluster serves rollouts.sluice.dev.
const EnvRolloutResources = "SLUICE_ROLLOUT_RESOURCES"

// EnvTemporalUI is the Temporal UI's address, for the links on Rollout
// resources (the CLI reads the same variable).
const EnvTemporalUI = "SLUICE_TEMPORAL_UI"

// NewMirror returns the writer of Rollout resources, or nil when they are
// turned off. It writes nothing until the cluster serves rollouts.sluice.dev
// (Writer.Serve finds out).
func NewMirror(cfg *rest.Config, temporalNamespace string, log *slog.Logger) (*mirror.Writer, error) {
	if v := os.Getenv(EnvRolloutResources); strings.EqualFold(v, "off") || strings.EqualFold(v, "false") {
		log.Info("Rollout resources turned off", "env", EnvRolloutResources)
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &mirror.Writer{Dynamic: dyn, Kube: kube, Discovery: kube.Discovery(), UI: os.Getenv(EnvTemporalUI),
		Namespace: temporalNamespace, Log: log}, nil
}

// rolloutStatus reads rollouts' status queries for the mirror's refresher.
type rolloutStatus struct{ temporal client.Client }

func (s rolloutStatus) RolloutStatus(ctx context.Context, t knative.TargetRef) (api.Status, bool, error) {
	v, err := s.temporal.QueryWorkflow(ctx, api.RolloutID(t), "", api.QueryStatus)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return api.Status{}, false, nil
	}
	if err != nil {
		return api.Status{}, false, fmt.Errorf("query %s: %w", api.RolloutID(t), err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		return api.Status{}, false, fmt.Errorf("decode the status of %s: %w", api.RolloutID(t), err)
	}
	return st, true, nil
}
