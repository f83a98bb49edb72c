package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/mirror"
	"github.com/sluicehq/sluice/templates"
	"github.com/sluicehq/sluice/workflows/control"
)

// EnvRolloutResources turns the Rollout resources off ("off"); by default
// the worker writes them when the cluster serves rollouts.sluice.dev.
const EnvRolloutResources = "SLUICE_ROLLOUT_RESOURCES"

// EnvRolloutResourcesRate is how many writes a second the worker spends on
// Rollout resources and their Kubernetes events at most (a whole number of
// at least 1; mirror.DefaultWriteRate when unset).
const EnvRolloutResourcesRate = "SLUICE_ROLLOUT_RESOURCES_RATE"

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
	pace := mirror.DefaultWriteRate
	if v := strings.TrimSpace(os.Getenv(EnvRolloutResourcesRate)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: must be a whole number of writes a second, at least 1", EnvRolloutResourcesRate, v)
		}
		pace = n
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
		Namespace: temporalNamespace, Log: log, Rate: pace}, nil
}

// NewTemplates reads the shared analysis templates targets name.
func NewTemplates(cfg *rest.Config) (templates.Reader, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return templates.Reader{}, fmt.Errorf("dynamic client: %w", err)
	}
	return templates.Reader{Dynamic: dyn}, nil
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

// commander carries out the commands asked on Rollout resources, once the
// cluster proves it checks who asked them.
type commander struct {
	control *control.Client
	kube    kubernetes.Interface

	mu        sync.Mutex
	checkedAt time.Time
	checked   error
}

// verifiedFor is how long one look at the admission policy is trusted.
const verifiedFor = 30 * time.Second

// Verified reports whether the sluice-rollout-commands policy is installed
// and bound to deny: only then is spec.command.by the requester's name.
func (c *commander) Verified(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checkedAt.IsZero() && time.Since(c.checkedAt) < verifiedFor {
		return c.checked
	}
	c.checked, c.checkedAt = c.verify(ctx), time.Now()
	return c.checked
}

func (c *commander) verify(ctx context.Context) error {
	adm := c.kube.AdmissionregistrationV1()
	install := "install it with sluice's manifests (config/deploy/115-policy-rollout-commands.yaml, or the chart)"
	_, err := adm.ValidatingAdmissionPolicies().Get(ctx, mirror.CommandPolicy, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the ValidatingAdmissionPolicy %s is not installed; %s", mirror.CommandPolicy, install)
	}
	if err != nil {
		return fmt.Errorf("read the ValidatingAdmissionPolicy %s: %w", mirror.CommandPolicy, err)
	}
	b, err := adm.ValidatingAdmissionPolicyBindings().Get(ctx, mirror.CommandPolicy, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the ValidatingAdmissionPolicyBinding %s is not installed; %s", mirror.CommandPolicy, install)
	}
	if err != nil {
		return fmt.Errorf("read the ValidatingAdmissionPolicyBinding %s: %w", mirror.CommandPolicy, err)
	}
	if b.Spec.PolicyName != mirror.CommandPolicy || !slices.Contains(b.Spec.ValidationActions, admissionv1.Deny) {
		return fmt.Errorf("the ValidatingAdmissionPolicyBinding %s must bind policy %s with validationActions [Deny]", mirror.CommandPolicy, mirror.CommandPolicy)
	}
	return nil
}

// Command sends the command on behalf of by, deduplicated by id.
func (c *commander) Command(ctx context.Context, t knative.TargetRef, name, by, reason, id string) (string, error) {
	return c.control.SendAs(ctx, t, name, api.Command{By: by, Reason: reason}, id)
}
