package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/workflows/control"
)

func newListCommand(g *globals) *cobra.Command {
	var f control.Filter
	var all bool
	var target string
	cmd := withOutput(&cobra.Command{
		Use:   "list",
		Short: "List rollouts, running and recent, by namespace, target or phase",
		Example: `  sluice list                      # rollouts of the namespace (-n), newest first
  sluice list -A --phase Paused     # every paused rollout
  sluice list --target hello -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(g.output); err != nil {
				return err
			}
			if !all {
				f.Namespace = g.kubeNamespace("")
			}
			if target != "" {
				t, err := control.ParseTarget(g.kubeNamespace(""), target)
				if err != nil {
					return err
				}
				f.Target = api.TargetAttr(t)
			}
			c, closeFn, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			rollouts, err := c.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			return printAs(cmd.OutOrStdout(), g.output, rollouts, func(w io.Writer) { renderList(w, rollouts, time.Now()) })
		},
	})
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "rollouts of every namespace")
	cmd.Flags().StringVar(&target, "target", "", "only this target (NAME, service/NAME or configuration/NAME)")
	cmd.Flags().StringVar(&f.Phase, "phase", "", "only this phase, e.g. Holding, AwaitingPromotion, Paused, RolledBack")
	cmd.Flags().BoolVar(&f.Running, "running", false, "only rollouts still running")
	cmd.Flags().IntVar(&f.Limit, "limit", 50, "at most this many")
	return withExitCodes(cmd, exitCodesPlain)
}

func newHistoryCommand(g *globals) *cobra.Command {
	var limit int
	cmd := withOutput(&cobra.Command{
		Use:     "history TARGET",
		Short:   "Past rollouts of a target: candidate, outcome, duration",
		Example: "  sluice history hello\n  sluice history configuration/api -n shop --limit 5 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(g.output); err != nil {
				return err
			}
			target, c, closeFn, err := g.forTarget(cmd, args[0])
			if err != nil {
				return err
			}
			defer closeFn()
			runs, err := c.History(cmd.Context(), target, limit)
			if err != nil {
				return err
			}
			return printAs(cmd.OutOrStdout(), g.output, runs, func(w io.Writer) { renderList(w, runs, time.Now()) })
		},
	})
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many")
	return cmd
}

// renderList prints rollouts as a table, newest first.
func renderList(w io.Writer, rs []control.Summary, now time.Time) {
	if len(rs) == 0 {
		fmt.Fprintln(w, "No rollouts found.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tCANDIDATE\tSTABLE\tPHASE\tSTEP\tWEIGHT\tSTARTED\tDURATION")
	for _, r := range rs {
		phase := r.Phase
		if r.Status == "CONTINUED_AS_NEW" && r.Outcome == "" {
			phase += " (continued)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d%%\t%s\t%s\n", r.Target, r.Candidate, orNone(r.Stable), phase, r.Step, r.Weight,
			stamp(r.StartedAt), r.Duration(now).Round(time.Second))
	}
	tw.Flush()
}

func newRetryCommand(g *globals) *cobra.Command {
	var reason string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:     "retry TARGET",
		Short:   "Start the last rollout of a target again, after an abort or a rollback",
		Example: "  sluice retry hello\n  sluice retry configuration/api -n shop --reason \"fixed the flaky check\"",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, c, st, closeFn, err := g.targetStatus(cmd, args[0], timeout)
			if err != nil {
				return err
			}
			defer closeFn()
			if !st.Phase.Done() {
				return &control.RejectedError{Reason: fmt.Sprintf("the rollout of %s is still %s; abort it first", st.Candidate, st.Shown)}
			}
			if st.Outcome == api.OutcomeSucceeded {
				return &control.RejectedError{Reason: fmt.Sprintf("the rollout of %s succeeded; there is nothing to retry", st.Candidate)}
			}
			if reason == "" {
				reason = fmt.Sprintf("retry after %s: %s", st.Outcome, st.Reason)
			}
			runID, err := c.Start(cmd.Context(), target, st.Candidate, reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "retrying the rollout of %s on %s (run %s)\n", st.Candidate, target, runID)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the rollout's details")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultTimeout, "how long to wait for the last rollout's answer (exit 9 when it passes)")
	return withExitCodes(cmd, exitCodesCommand)
}
