package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

// Annotations a verb carries for the habits below.
const (
	// annotationOutput: the verb prints -o json|yaml; others refuse -o.
	annotationOutput = "sluice.dev/output"
	// annotationExitCodes: the verb's exit codes, shown in its --help.
	annotationExitCodes = "sluice.dev/exit-codes"
)

// Exit codes as --help shows them.
const (
	exitCodesCommand = `  0  done: the rollout accepted the command (its answer is printed)
  1  could not ask (bad flags, Temporal or the cluster unreachable)
  3  the rollout refused the command; the reason is printed
  4  the target has no rollout
  9  no answer within --timeout (the message says whether any worker polls the task queue)`
	exitCodesRead = `  0  shown
  1  could not read (bad flags, Temporal unreachable)
  4  the target has no rollout
  9  no answer within --timeout (the message says whether any worker polls the task queue)`
	exitCodesPlain = `  0  done
  1  could not do what was asked; the reason is printed`
)

// defaultTimeout bounds a wait for a worker's answer: long enough for a busy
// worker, short enough that a person learns soon that none is there.
const defaultTimeout = 20 * time.Second

// withOutput marks verbs whose output -o shapes.
func withOutput(cmd *cobra.Command) *cobra.Command {
	cmd.Annotations = withAnnotation(cmd.Annotations, annotationOutput, "true")
	return cmd
}

// withExitCodes documents a verb's exit codes in its --help.
func withExitCodes(cmd *cobra.Command, codes string) *cobra.Command {
	cmd.Annotations = withAnnotation(cmd.Annotations, annotationExitCodes, codes)
	return cmd
}

func withAnnotation(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// applyHabits gives every verb kubectl's and kn's habits: -o refused where
// it means nothing, exit codes in --help, completion of targets, and the
// plugin's name in usage when run as kn-sluice.
func applyHabits(root *cobra.Command, g *globals, kn bool) {
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if cmd.Flags().Changed("output") && cmd.Annotations[annotationOutput] == "" {
			return fmt.Errorf("-o/--output is not supported by %s: its output is a message, not an object", cmd.CommandPath())
		}
		return nil
	}
	root.SetUsageTemplate(root.UsageTemplate() + `{{if index .Annotations "` + annotationExitCodes + `"}}
Exit codes:
{{index .Annotations "` + annotationExitCodes + `"}}
{{end}}`)
	if kn {
		// `kn sluice promote --help` says kn sluice, not kn or sluice.
		root.Annotations = withAnnotation(root.Annotations, cobra.CommandDisplayNameAnnotation, "kn sluice")
	}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		if kn && cmd.Example != "" {
			cmd.Example = strings.ReplaceAll(cmd.Example, "  sluice ", "  kn sluice ")
		}
		if cmd.Runnable() && cmd.Annotations[annotationExitCodes] == "" {
			withExitCodes(cmd, exitCodesPlain)
		}
		if strings.Contains(cmd.Use, "TARGET") && cmd.ValidArgsFunction == nil {
			cmd.ValidArgsFunction = g.completeTargets
		}
	}
	walk(root)
}

// completeTargets offers the opted-in Services (NAME) and Configurations
// (configuration/NAME) of the namespace, read from the cluster.
func (g *globals) completeTargets(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	kc, err := worker.KubeConfig("")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	kc.Timeout = 3 * time.Second
	serving, err := worker.ServingClient(kc)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, ns := cmd.Context(), g.kubeNamespace("")
	if ctx == nil {
		ctx = context.Background()
	}
	var out []string
	if svcs, err := serving.ServingV1().Services(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range svcs.Items {
			if on, _ := config.OptedIn(s.Annotations); on {
				out = append(out, s.Name)
			}
		}
	}
	if cfgs, err := serving.ServingV1().Configurations(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range cfgs.Items {
			_, route := c.Annotations[config.AnnotationRoute]
			if on, _ := config.OptedIn(c.Annotations); on && route {
				out = append(out, "configuration/"+c.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.DeleteFunc(out, func(s string) bool { return !strings.HasPrefix(s, prefix) }), cobra.ShellCompDirectiveNoFileComp
}

// untilAnswered runs call, which needs a worker to answer (an update, a
// query), within timeout. When the time runs out it says plainly whether a
// worker polls the task queue, which is the usual reason.
func untilAnswered(ctx context.Context, c *control.Client, timeout time.Duration, what string, call func(context.Context) error) error {
	if timeout <= 0 {
		return call(ctx)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := call(callCtx)
	if err == nil || !timedOut(err) || ctx.Err() != nil {
		return err
	}
	probe, cancelProbe := context.WithTimeout(ctx, 5*time.Second)
	defer cancelProbe()
	n, perr := c.Pollers(probe, c.TaskQueue)
	switch {
	case perr != nil:
		return &codedError{code: exitTimeout, err: fmt.Errorf("no answer from %s within %s, and the task queue %s could not be read: %v", what, timeout, c.TaskQueue, perr)}
	case n == 0:
		return &codedError{code: exitTimeout, err: fmt.Errorf(
			"no answer within %s: no sluice worker polls the task queue %s, so nothing can answer for %s; start one (sluice worker), check --task-queue/--cluster (SLUICE_TASK_QUEUE, SLUICE_CLUSTER), or send the command with --no-wait and Temporal keeps it until a worker comes",
			timeout, c.TaskQueue, what)}
	}
	return &codedError{code: exitTimeout, err: fmt.Errorf("no answer from %s within %s, though %d worker(s) poll %s: they may be busy or unable to reach the cluster; try a longer --timeout, or see it in the Temporal UI", what, timeout, n, c.TaskQueue)}
}

// timedOut reports whether err is a deadline that passed, as the Temporal
// client or gRPC reports it.
func timedOut(err error) bool {
	var dl *serviceerror.DeadlineExceeded
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &dl) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := status.FromError(e); ok && s.Code() == codes.DeadlineExceeded {
			return true
		}
	}
	return false
}
