package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/worker"
	"github.com/sluicehq/sluice/workflows/control"
)

func newStartCommand(g *globals) *cobra.Command {
	var reason string
	var wait bool
	cmd := &cobra.Command{
		Use:   "start TARGET REVISION",
		Short: "Start a rollout of REVISION on TARGET by hand (or supersede the running one's candidate)",
		Example: `  sluice start hello hello-00002
  sluice start configuration/api api-00007 -n shop --reason "hotfix #123" --wait`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, c, closeFn, err := g.forTarget(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeFn()
			runID, err := c.Start(cmd.Context(), target, args[1], reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rollout of %s on %s: workflow %s (run %s)\n", args[1], target, api.RolloutID(target), runID)
			if !wait {
				return nil
			}
			return printOutcome(cmd.Context(), cmd, c, target)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the rollout's details")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the rollout to end; exit non-zero unless it succeeded")
	return cmd
}

func newStatusCommand(g *globals) *cobra.Command {
	var watch bool
	var kubeconfig string
	var timeout time.Duration
	cmd := withOutput(&cobra.Command{
		Use:     "status TARGET",
		Aliases: []string{"get"},
		Short:   "Show a rollout: phase, step, traffic, holds, deadlines and command history",
		Long: `Show a rollout. With --watch, follow it until it ends: on a terminal the view is redrawn in
place, otherwise one line is printed per change; the exit code then says how it ended
(0 succeeded, 5 rolled back, 6 aborted, 7 failed, 8 superseded, 9 --timeout passed), so a
pipeline can wait on it.`,
		Example: `  sluice status hello
  sluice status configuration/api -n shop -o json
  sluice status hello --watch --timeout 30m && echo promoted`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(g.output); err != nil {
				return err
			}
			answer := timeout
			if watch || !cmd.Flags().Changed("timeout") {
				answer = defaultTimeout // the first answer; --watch's --timeout bounds the rest
			}
			target, c, st, closeFn, err := g.targetStatus(cmd, args[0], answer)
			if err != nil {
				return err
			}
			defer closeFn()
			st.Serving = servedTraffic(cmd, kubeconfig, st)
			if watch {
				return watchStatus(cmd, c, target, st, timeout)
			}
			return printAs(cmd.OutOrStdout(), g.output, st, func(w io.Writer) {
				renderStatus(w, st)
				fmt.Fprintf(w, "\nTemporal UI: %s\n", uiLink(g.uiURL, g.temporalNamespace(), st.Target))
			})
		},
	})
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it ends; the exit code says how it ended")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for the rollout's answer (default 20s); with --watch, for its end (default: no limit); exit 9 when it passes")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "also read what Knative serves from this cluster (default: the usual kubeconfig, if any)")
	return withExitCodes(cmd, exitCodesRead+`
  with --watch, how the rollout ended: 0 succeeded, 5 rolled back, 6 aborted, 7 failed, 8 superseded`)
}

// servedTraffic reads the traffic object's status.traffic, so status can
// show what the cluster serves beside what sluice wrote. Best effort: with
// no cluster access, status shows what the rollout knows.
func servedTraffic(cmd *cobra.Command, kubeconfig string, st api.Status) []servingv1.TrafficTarget {
	if st.Object.Name == "" || st.Phase.Done() {
		return nil
	}
	kc, err := worker.KubeConfig(kubeconfig)
	if err != nil {
		return nil
	}
	kc.Timeout = 3 * time.Second
	serving, err := worker.ServingClient(kc)
	if err != nil {
		return nil
	}
	live, err := knative.Client{Serving: serving}.ReadTraffic(cmd.Context(), st.Object)
	if err != nil {
		return nil
	}
	return live.Status
}

func newPromoteCommand(g *globals) *cobra.Command {
	var full bool
	var f commandFlags
	cmd := &cobra.Command{
		Use:   "promote TARGET",
		Short: "End the current hold or pass the current gate; with --full, go to 100% now",
		Example: `  sluice promote hello
  sluice promote hello --full --reason "metrics look good"
  sluice promote hello --via kubernetes   # as the kube context's user, with no Temporal access
  sluice promote configuration/api -n shop --no-wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := api.CommandPromote
			if full {
				name = api.CommandPromoteFull
			}
			return sendCommand(cmd, g, args[0], name, f)
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "skip the remaining steps and send the candidate 100%")
	f.add(cmd, "why, kept in the rollout's history")
	return withExitCodes(cmd, exitCodesCommand)
}

func newSimpleCommand(g *globals, use, short, name string) *cobra.Command {
	var f commandFlags
	cmd := &cobra.Command{
		Use:   use + " TARGET",
		Short: short,
		Example: fmt.Sprintf(`  sluice %[1]s hello --reason "looking into p99"
  sluice %[1]s configuration/api -n shop --no-wait`, use),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sendCommand(cmd, g, args[0], name, f)
		},
	}
	f.add(cmd, "why, kept in the rollout's history")
	return withExitCodes(cmd, exitCodesCommand)
}

func newAbortCommand(g *globals) *cobra.Command {
	var f commandFlags
	cmd := &cobra.Command{
		Use:   "abort TARGET --reason TEXT",
		Short: "Abort a rollout: restore the traffic from before it started",
		Example: `  sluice abort hello --reason "error rate up in eu"
  sluice abort configuration/api -n shop --reason "bad migration" --no-wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sendCommand(cmd, g, args[0], api.CommandAbort, f)
		},
	}
	f.add(cmd, "why (required), kept in the rollout's history")
	_ = cmd.MarkFlagRequired("reason")
	return withExitCodes(cmd, exitCodesCommand)
}

func newUndoCommand(g *globals) *cobra.Command {
	var to, reason string
	var noWait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "undo TARGET --reason TEXT [--to REVISION]",
		Short: "Give the traffic back, in one write, to the Revision that had it before (also after the rollout ended)",
		Long: `Give all of TARGET's traffic, in one write, to the Revision that had 100% of it before the
last rollout (as sluice.dev/stable-history on the Service or Route records), or to --to. No steps,
no analysis: the Revision ran the traffic before. It must be Ready (a capacity policy scales it up
first); tags are kept, and the write is verified in Knative's status like any step. The Revision
it takes the traffic from is marked ended (sluice.dev/ended), so its own events do not roll it out
again. While a rollout is running, undo aborts it: its rollback is the undo.`,
		Example: `  sluice undo hello --reason "p99 up since the 14:00 release"
  sluice undo hello --to hello-00003 --reason "back to last week's build"
  sluice undo configuration/api -n shop --reason "bad migration" --no-wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, c, closeFn, err := g.forTarget(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeFn()
			started, err := c.Undo(cmd.Context(), target, to, reason)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if started.Aborted {
				fmt.Fprintf(out, "a rollout was running, so undo aborted it: %s\n", started.Message)
				return nil
			}
			fmt.Fprintf(out, "undo of %s: workflow %s (run %s)\n", target, api.RolloutID(target), started.RunID)
			if noWait {
				return nil
			}
			return untilAnswered(cmd.Context(), c, timeout, "the undo of "+target.String(), func(ctx context.Context) error {
				return printOutcome(ctx, cmd, c, target)
			})
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the Revision to go back to (default: the last one that had 100% before the one that has it now)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required), kept in the target's history")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the undo has started, without waiting for its end")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the undo to end (exit 9 when it passes, saying whether a worker polls)")
	_ = cmd.MarkFlagRequired("reason")
	return withExitCodes(cmd, exitCodesCommand)
}

// printOutcome waits for the target's rollout to end and prints how; the
// exit code says it too.
func printOutcome(ctx context.Context, cmd *cobra.Command, c *control.Client, target knative.TargetRef) error {
	res, err := c.Wait(ctx, target)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", res.Outcome, res.Reason)
	return outcomeErr(res.Outcome)
}

// commandFlags are the flags every command verb takes.
type commandFlags struct {
	reason string
	// noWait sends the command as a signal: it returns once Temporal has
	// recorded it, without the rollout's answer (for scripts, and for a
	// rollout whose worker is down, where an update would wait for it).
	noWait bool
	// timeout bounds the wait for the rollout's answer.
	timeout time.Duration
	// via is where the command goes: temporal or kubernetes.
	via string
}

func (f *commandFlags) add(cmd *cobra.Command, reasonHelp string) {
	cmd.Flags().StringVar(&f.reason, "reason", "", reasonHelp)
	cmd.Flags().BoolVar(&f.noWait, "no-wait", false, "send as a signal and return at once; the rollout validates it on arrival (see sluice status)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", defaultTimeout, "how long to wait for the rollout's answer (exit 9 when it passes)")
	cmd.Flags().StringVar(&f.via, "via", viaTemporal, "temporal: send to Temporal as --as; kubernetes: ask on the target's Rollout resource as the kube context's user, whom Kubernetes authenticates and authorizes (no Temporal access needed)")
}

func sendCommand(cmd *cobra.Command, g *globals, arg, name string, f commandFlags) error {
	switch f.via {
	case viaTemporal:
	case viaKubernetes:
		return askViaKubernetes(cmd, g, arg, name, f)
	default:
		return fmt.Errorf("--via: want %s or %s, got %q", viaTemporal, viaKubernetes, f.via)
	}
	target, c, closeFn, err := g.forTarget(cmd, arg)
	if err != nil {
		return err
	}
	defer closeFn()
	if f.noWait {
		if err := c.Signal(cmd.Context(), target, name, f.reason); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "sent %s to the rollout of %s as a signal; it is validated on arrival: sluice status %s shows the outcome\n", name, target, arg)
		return nil
	}
	var msg string
	err = untilAnswered(cmd.Context(), c, f.timeout, "the rollout of "+target.String(), func(ctx context.Context) error {
		msg, err = c.Send(ctx, target, name, f.reason)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), msg)
	return nil
}

func newSetupCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "setup",
		Short:   "Register sluice's search attributes in the Temporal namespace (idempotent)",
		Example: "  sluice setup\n  TEMPORAL_ADDRESS=temporal-frontend.temporal:7233 sluice setup --temporal-namespace rollouts",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeFn, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			ns := g.temporalNamespace()
			added, err := c.Setup(cmd.Context(), ns)
			if err != nil {
				return err
			}
			if len(added) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "search attributes already registered in %s\n", ns)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered in %s: %s\n", ns, strings.Join(added, ", "))
			return nil
		},
	}
}

// forTarget parses a target argument and connects to Temporal for it.
func (g *globals) forTarget(cmd *cobra.Command, arg string) (knative.TargetRef, *control.Client, func(), error) {
	target, err := control.ParseTarget(g.kubeNamespace(""), arg)
	if err != nil {
		return target, nil, nil, err
	}
	target = target.In(g.cluster)
	c, closeFn, err := g.dial(cmd.Context())
	return target, c, closeFn, err
}

// targetStatus is forTarget, then the rollout's status: where the read
// verbs and retry start. On an error nothing is left open.
func (g *globals) targetStatus(cmd *cobra.Command, arg string, timeout time.Duration) (knative.TargetRef, *control.Client, api.Status, func(), error) {
	target, c, closeFn, err := g.forTarget(cmd, arg)
	if err != nil {
		return target, nil, api.Status{}, nil, err
	}
	var st api.Status
	err = untilAnswered(cmd.Context(), c, timeout, "the rollout of "+target.String(), func(ctx context.Context) error {
		st, err = c.Status(ctx, target)
		return err
	})
	if err != nil {
		closeFn()
		return target, nil, st, nil, err
	}
	return target, c, st, closeFn, nil
}

// outcomeError is a rollout, waited for, that ended without succeeding.
type outcomeError struct{ outcome api.Outcome }

func (e *outcomeError) Error() string { return "the rollout ended " + string(e.outcome) }

// outcomeErr is nil for a success and an *outcomeError otherwise.
func outcomeErr(o api.Outcome) error {
	if o == api.OutcomeSucceeded {
		return nil
	}
	return &outcomeError{outcome: o}
}

// uiLink is the rollout's page in the Temporal UI.
func uiLink(base, namespace string, t knative.TargetRef) string {
	return strings.TrimSuffix(base, "/") + "/namespaces/" + url.PathEscape(namespace) + "/workflows/" + url.PathEscape(api.RolloutID(t))
}

// temporalNamespace is the Temporal namespace the verbs talk to.
func (g *globals) temporalNamespace() string {
	if g.temporalN != "" {
		return g.temporalN
	}
	return envOr("TEMPORAL_NAMESPACE", "default")
}
