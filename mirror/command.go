package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// CommandPolicy names the ValidatingAdmissionPolicy (and its binding) that
// makes spec.command.by the requester's own user name. Without both, a
// name in spec.command is only what its writer claims, and the worker
// refuses to act on it.
const CommandPolicy = "sluice-rollout-commands"

// Commander carries out commands asked on Rollout resources.
type Commander interface {
	// Verified reports whether the cluster checks spec.command.by on
	// admission (CommandPolicy is installed and bound); the error says what
	// is missing.
	Verified(ctx context.Context) error
	// Command sends the command to t's rollout as the Temporal update
	// named name, deduplicated by id, and returns the rollout's answer.
	Command(ctx context.Context, t knative.TargetRef, name, by, reason, id string) (string, error)
}

// commandTimeout bounds one command: the update waits for the rollout's
// worker to answer.
const commandTimeout = time.Minute

// pendingCommand reports whether ro asks a command the worker has not yet
// answered.
func pendingCommand(ro Rollout) bool {
	c := ro.Spec.Command
	return c != nil && c.ID != "" && (ro.Status.Command == nil || ro.Status.Command.ID != c.ID)
}

// command carries out ro's pending command once per ID in this worker
// (another replica may too: the update's ID makes the rollout act once),
// and writes the answer to the Rollout's status.
func (r *Refresher) command(ctx context.Context, ro Rollout) {
	c := *ro.Spec.Command
	key := commandKey(ro, c.ID)
	r.mu.Lock()
	if r.commands == nil {
		r.commands = map[string]bool{}
	}
	if r.commands[key] {
		r.mu.Unlock()
		return
	}
	for k := range r.commands {
		// An earlier command of this Rollout, answered: a new one replaced it.
		if strings.HasPrefix(k, commandKey(ro, "")) {
			delete(r.commands, k)
		}
	}
	r.commands[key] = true
	r.mu.Unlock()
	go func() {
		// The key stays after the answer is written: the informer may still
		// hand over a copy from before it, and that copy must not send the
		// command again. observe forgets it once a copy shows the answer.
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		res := CommandResult{ID: c.ID, Name: c.Name, By: c.By}
		msg, err := r.carryOut(ctx, ro, c)
		res.Accepted, res.Message, res.At = err == nil, msg, metav1.Now()
		if err != nil {
			res.Message = err.Error()
		}
		r.Log.Info("command asked on a Rollout resource", "rollout", ro.Namespace+"/"+ro.Name, "command", c.Name,
			"by", c.By, "id", c.ID, "accepted", res.Accepted, "answer", res.Message)
		if err := r.Writer.answer(ctx, ro.Namespace, ro.Name, res); err != nil {
			r.Log.Warn("the answer to a command was not written to its Rollout", "rollout", ro.Namespace+"/"+ro.Name, "id", c.ID, "error", err)
			// Not answered: the next copy of the Rollout may ask again.
			r.forget(key)
		}
	}()
}

// answeredCommand forgets ro's command once ro shows its answer: copies
// older than this one are not handed over again.
func (r *Refresher) answeredCommand(ro Rollout) {
	if c := ro.Spec.Command; c != nil && ro.Status.Command != nil && ro.Status.Command.ID == c.ID {
		r.forget(commandKey(ro, c.ID))
	}
}

// commandKey names command id of ro among those this worker carries out.
func commandKey(ro Rollout, id string) string { return ro.Namespace + "/" + ro.Name + "/" + id }

func (r *Refresher) forget(key string) {
	r.mu.Lock()
	delete(r.commands, key)
	r.mu.Unlock()
}

// carryOut checks a command and sends it.
func (r *Refresher) carryOut(ctx context.Context, ro Rollout, c CommandRequest) (string, error) {
	if !slices.Contains(api.Commands(), c.Name) {
		return "", fmt.Errorf("%q is not a command; ask one of %v", c.Name, api.Commands())
	}
	if c.By == "" {
		return "", errors.New("spec.command.by is empty: it must be your Kubernetes user name")
	}
	if r.Commander == nil {
		return "", errors.New("this worker takes no commands through Rollout resources")
	}
	if err := r.Commander.Verified(ctx); err != nil {
		return "", fmt.Errorf("not carried out: the requester's name cannot be trusted: %w", err)
	}
	return r.Commander.Command(ctx, r.target(ro), c.Name, c.By, c.Reason, c.ID)
}

// answer writes res as the Rollout's status.command, whatever else its
// status shows.
func (w *Writer) answer(ctx context.Context, namespace, name string, res CommandResult) error {
	rollouts := w.Dynamic.Resource(GVR).Namespace(namespace)
	for attempt := 0; ; attempt++ {
		obj, err := rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&res)
		if err != nil {
			return err
		}
		status, _ := obj.Object["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		status["command"] = st
		obj.Object["status"] = status
		updated, err := rollouts.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("write the answer to Rollout %s/%s: %w", namespace, name, err)
		}
		w.written.Store(namespace+"/"+name, updated)
		return nil
	}
}
