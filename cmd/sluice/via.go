package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicehq/sluice/mirror"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

// Where a command goes: straight to Temporal (the default), or through the
// target's Rollout resource, so Kubernetes authenticates and authorizes the
// requester and sluice records the name the API server vouches for.
const (
	viaTemporal   = "temporal"
	viaKubernetes = "kubernetes"
)

// cliFieldManager is the CLI's name in a Rollout's managedFields.
const cliFieldManager = "sluice-cli"

// askViaKubernetes asks the command on the target's Rollout resource as the
// kube context's user, and waits for the rollout's answer in its status.
func askViaKubernetes(cmd *cobra.Command, g *globals, arg, name string, f commandFlags) error {
	ctx := cmd.Context()
	target, err := control.ParseTarget(g.kubeNamespace(""), arg)
	if err != nil {
		return err
	}
	kc, err := worker.KubeConfig("")
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(kc)
	if err != nil {
		return err
	}
	who, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("ask Kubernetes who you are (kubectl auth whoami): %w", err)
	}
	user := who.Status.UserInfo.Username
	req := mirror.CommandRequest{ID: string(uuid.NewUUID()), Name: name, By: user, Reason: f.reason}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"command": req}})
	if err != nil {
		return err
	}
	rollouts := dyn.Resource(mirror.GVR).Namespace(target.Namespace)
	_, err = rollouts.Patch(ctx, target.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: cliFieldManager})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: no Rollout %s/%s: sluice makes one when a rollout of the target starts (kubectl get rollouts -n %s)",
			control.ErrNoRollout, target.Namespace, target.Name, target.Namespace)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("Kubernetes refused %s the command: %w; it needs patch on rollouts.sluice.dev in %s (the sluice-rollout-commander ClusterRole, bound there)",
			user, err, target.Namespace)
	case err != nil:
		return fmt.Errorf("ask %s on Rollout %s/%s: %w", name, target.Namespace, target.Name, err)
	}
	if f.noWait {
		fmt.Fprintf(cmd.OutOrStdout(), "asked %s on Rollout %s/%s as %s; its answer shows in kubectl get rollout %s -n %s -o jsonpath='{.status.command}'\n",
			name, target.Namespace, target.Name, user, target.Name, target.Namespace)
		return nil
	}
	res, err := awaitAnswer(ctx, rollouts, target.Name, req.ID, f.timeout)
	if err != nil {
		return err
	}
	if !res.Accepted {
		return &control.RejectedError{Reason: res.Message}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s (as %s)\n", res.Message, user)
	return nil
}

// awaitAnswer polls the Rollout until its status answers command id.
func awaitAnswer(ctx context.Context, rollouts dynamic.ResourceInterface, name, id string, timeout time.Duration) (mirror.CommandResult, error) {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		obj, err := rollouts.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if res, ok := answerOf(obj, id); ok {
				return res, nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return mirror.CommandResult{}, &codedError{code: exitTimeout, err: fmt.Errorf(
					"no answer within %s: the command is asked on Rollout %s, but no sluice worker has carried it out; is a worker running, with Rollout resources on (SLUICE_ROLLOUT_RESOURCES)?", timeout, name)}
			}
			return mirror.CommandResult{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// answerOf reads the Rollout's answer to command id, if it has one.
func answerOf(obj *unstructured.Unstructured, id string) (mirror.CommandResult, bool) {
	var r mirror.Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
		return mirror.CommandResult{}, false
	}
	if r.Status.Command == nil || r.Status.Command.ID != id {
		return mirror.CommandResult{}, false
	}
	return *r.Status.Command, true
}
