package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/workflows/control"
)

func newWaveCommand(g *globals) *cobra.Command {
	var release string
	var timeout time.Duration
	wave := &cobra.Command{
		Use:   "wave",
		Short: "See and steer a release's waves across clusters (sluice.dev/waves)",
		Long: `A target with a sluice.dev/waves plan is rolled out cluster by cluster: each cluster's rollout
holds before its first step until its wave is released. These verbs act on the wave of the
target's newest release (--release to name another), from any cluster.`,
	}
	wave.PersistentFlags().StringVar(&release, "release", "", "the release (default: the newest wave of the target)")
	wave.PersistentFlags().DurationVar(&timeout, "timeout", defaultTimeout, "how long to wait for the wave's answer (exit 9 when it passes)")
	status := withOutput(&cobra.Command{
		Use:     "status TARGET",
		Short:   "Show every cluster's part in the wave: joined, released, at 100%, how it ended",
		Example: "  sluice wave status hello\n  sluice wave status hello --release v1.4.2 -o yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, closeFn, err := g.wave(cmd, args[0], release)
			if err != nil {
				return err
			}
			defer closeFn()
			var st api.WaveStatus
			err = untilAnswered(cmd.Context(), c, timeout, "wave "+id, func(ctx context.Context) error {
				st, err = c.WaveStatus(ctx, id)
				return err
			})
			if err != nil {
				return err
			}
			return printAs(cmd.OutOrStdout(), g.output, st, func(w io.Writer) { renderWave(w, id, st) })
		},
	})
	wave.AddCommand(withExitCodes(status, exitCodesRead))
	for _, v := range []struct{ name, short string }{
		{api.CommandPromote, "End the current soak: release the next wave now"},
		{api.CommandPause, "Release no further wave until resumed (rollouts already released go on)"},
		{api.CommandResume, "Release waves again"},
		{api.CommandAbort, "Stop every wave: unreleased clusters end where they began, released ones roll back"},
	} {
		var reason string
		cmd := &cobra.Command{
			Use:     v.name + " TARGET",
			Short:   v.short,
			Example: fmt.Sprintf("  sluice wave %s hello --reason \"checked staging\"\n  sluice wave %s hello --release v1.4.2 --reason \"checked staging\"", v.name, v.name),
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if v.name == api.CommandAbort && strings.TrimSpace(reason) == "" {
					return fmt.Errorf("abort needs --reason: it is kept with the wave and told to every cluster")
				}
				c, id, closeFn, err := g.wave(cmd, args[0], release)
				if err != nil {
					return err
				}
				defer closeFn()
				err = untilAnswered(cmd.Context(), c, timeout, "wave "+id, func(ctx context.Context) error {
					return c.WaveCommand(ctx, id, v.name, reason)
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sent %s to %s; sluice wave status %s shows what it did\n", v.name, id, args[0])
				return nil
			},
		}
		cmd.Flags().StringVar(&reason, "reason", "", "why, kept in the wave's history")
		wave.AddCommand(withExitCodes(cmd, exitCodesCommand))
	}
	return wave
}

// wave dials Temporal and finds the wave of TARGET's release (its newest
// without one). On an error nothing is left open.
func (g *globals) wave(cmd *cobra.Command, arg, release string) (*control.Client, string, func(), error) {
	target, c, closeFn, err := g.forTarget(cmd, arg)
	if err != nil {
		return nil, "", nil, err
	}
	id, err := c.WaveID(cmd.Context(), target, release)
	if err != nil {
		closeFn()
		return nil, "", nil, err
	}
	return c, id, closeFn, nil
}

// renderWave prints a wave: its plan and phase, then one row per cluster.
func renderWave(w io.Writer, id string, st api.WaveStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Wave:\t%s\t(release %s)\n", id, st.Release)
	phase := st.Phase
	if st.Outcome == "" {
		phase += fmt.Sprintf(" — wave %d of %d", st.Current, len(st.Plan.Waves))
		if !st.SoakUntil.IsZero() {
			phase += ", soak ends " + stamp(st.SoakUntil)
		}
		if st.Paused {
			phase += ", paused: no further wave is released until resumed"
		}
	}
	fmt.Fprintf(tw, "Phase:\t%s\n", phase)
	if st.Outcome != "" {
		fmt.Fprintf(tw, "Outcome:\t%s: %s\n", st.Outcome, st.Reason)
	}
	var plan []string
	for _, wv := range st.Plan.Waves {
		p := strings.Join(wv.Clusters, ", ")
		if wv.Soak > 0 {
			p += fmt.Sprintf(" (soak %s)", wv.Soak)
		}
		plan = append(plan, p)
	}
	fmt.Fprintf(tw, "Plan:\t%s; on failure: %s\n", strings.Join(plan, " → "), st.Plan.OnFailure)
	tw.Flush()
	fmt.Fprintln(w, "\nClusters:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  WAVE\tCLUSTER\tCANDIDATE\tJOINED\tRELEASED\tAT 100%\tENDED\tVERDICT")
	for _, m := range st.Members {
		ended := stamp(m.EndedAt)
		if m.Outcome != "" {
			ended = m.Outcome + " " + ended
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Wave, m.Cluster, orNone(m.Candidate), stamp(m.JoinedAt), stamp(m.ReleasedAt),
			stamp(m.ReachedAt), ended, orNone(m.Verdict))
	}
	tw.Flush()
	if len(st.Commands) > 0 {
		fmt.Fprintln(w, "\nCommands:")
		for _, c := range st.Commands {
			line := fmt.Sprintf("  %s  %s by %s", stamp(c.At), c.Name, c.By)
			if c.Reason != "" {
				line += ": " + c.Reason
			}
			if c.Rejected != "" {
				line += " (rejected: " + c.Rejected + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
}
