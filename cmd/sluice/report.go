package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/report"
	"github.com/sluicehq/sluice/version"
)

func newReportCommand(g *globals) *cobra.Command {
	var file string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "report TARGET",
		Short: "Write a rollout's report: one self-contained HTML file with its traffic, checks, commands and outcome",
		Long: `Write one HTML file for TARGET's latest rollout, running or ended: the candidate's traffic share over
time, every check's measurements over time (a comparison's candidate against its stable, with the allowed
effect), the commands with who, when and why, and the outcome. It is made from the rollout's Temporal
history and status query, so it works for any rollout Temporal still keeps, and needs no network to open.`,
		Example: "  sluice report hello\n  sluice report configuration/api -n shop -f - > api.html",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, c, st, closeFn, err := g.targetStatus(cmd, args[0], timeout)
			if err != nil {
				return err
			}
			defer closeFn()
			rounds, err := c.Rounds(cmd.Context(), target, st.Candidate)
			if err != nil {
				return fmt.Errorf("read the measurements of %s: %w", target, err)
			}
			var b bytes.Buffer
			in := report.Input{Status: st, Rounds: rounds, Generated: time.Now(), UILink: uiLink(g.uiURL, g.temporalNamespace(), st.Target), Version: version.Version}
			if err := report.Render(&b, in); err != nil {
				return fmt.Errorf("render the report of %s: %w", target, err)
			}
			if file == "-" {
				_, err := cmd.OutOrStdout().Write(b.Bytes())
				return err
			}
			if file == "" {
				file = fmt.Sprintf("sluice-%s-%s-%s.html", target.Namespace, strings.ToLower(string(target.Kind)), target.Name)
			}
			if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
				return fmt.Errorf("write the report: %w", err)
			}
			n := 0
			for _, r := range rounds {
				n += len(r.Measurements)
			}
			phase := string(st.Shown)
			if st.Outcome != "" {
				phase = string(st.Outcome)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: the rollout of %s (%s), %d rounds, %d measurements\n", file, st.Candidate, phase, len(rounds), n)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", defaultTimeout, "how long to wait for the rollout's answer (exit 9 when it passes)")
	cmd.Flags().StringVarP(&file, "file", "f", "", `where to write it ("-" for standard output; default sluice-NAMESPACE-KIND-NAME.html)`)
	return cmd
}
