package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// renderStatus prints a rollout for a person: where it stands first, then
// the step table, then who did what.
func renderStatus(w io.Writer, st api.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Rollout:\t%s\t(workflow %s)\n", st.Target, api.RolloutID(st.Target))
	phase := string(st.Shown)
	if st.StepCount > 0 && st.StepNumber > 0 && !st.Phase.Done() {
		phase += fmt.Sprintf(" — step %d of %d, candidate at %d%%", st.StepNumber, st.StepCount, st.Weight)
	}
	fmt.Fprintf(tw, "Phase:\t%s\n", phase)
	if st.Paused {
		fmt.Fprintf(tw, "Paused:\t%s\n", st.PauseReason)
	}
	if st.Outcome != "" {
		fmt.Fprintf(tw, "Outcome:\t%s: %s\n", st.Outcome, st.Reason)
	}
	ready := "not Ready yet"
	if st.CandidateReady {
		ready = "Ready"
	}
	fmt.Fprintf(tw, "Revisions:\t%s (stable) -> %s (candidate, %s)\n", orNone(st.Stable), st.Candidate, ready)
	if src := st.ReadinessSource(); src != "" {
		fmt.Fprintf(tw, "Readiness:\t%s\n", src)
	}
	if len(st.Superseded) > 0 {
		fmt.Fprintf(tw, "Superseded:\t%s\n", strings.Join(st.Superseded, ", "))
	}
	if st.Shortcut != "" {
		fmt.Fprintf(tw, "One write:\t%s\n", st.Shortcut)
	}
	if p := st.Preview; p != nil {
		where := "tag " + p.Tag
		if p.URL != "" {
			where = p.URL
		}
		fmt.Fprintf(tw, "Preview:\t%s, or any of the target's URLs with %s\n", where, p.Header)
	}
	if st.Serving != nil && !knative.StatusShows(st.Live, st.Serving) {
		fmt.Fprintf(tw, "Traffic:\t%s (written by sluice)\n", knative.FormatTraffic(st.Live))
		fmt.Fprintf(tw, "Serving:\t%s (%s status, as Knative reports it)\n", knative.FormatTraffic(st.Serving), st.Object)
	} else {
		fmt.Fprintf(tw, "Traffic:\t%s\n", knative.FormatTraffic(st.Live))
	}
	for _, p := range st.Pending {
		if p.Attempt > 1 {
			fmt.Fprintf(tw, "Retrying:\t%s, attempt %d: %s\n", p.Activity, p.Attempt, orNone(p.LastError))
		}
	}
	if wv := st.Wave; wv != nil {
		what := map[api.Phase]string{api.PhaseWaitingWave: ": waiting to be released", api.PhaseWaveHold: ": at 100%, waiting for the plan to end"}[st.Phase]
		fmt.Fprintf(tw, "Wave:\t%d of %d, release %s%s (sluice wave status %s)\n", wv.Wave, len(st.Policy.Waves.Waves), wv.Release, what, st.Target.Name)
	}
	if c := st.Capacity; c != nil {
		fmt.Fprintf(tw, "Pods:\t%s %d Ready, %s %d Ready (stages from %d stable pods)\n",
			st.Candidate, c.CandidatePods, st.Stable, c.StablePodsNow, c.StablePods)
	}
	if st.HoldLeftAt > 0 {
		fmt.Fprintf(tw, "Hold:\t%s left\n", time.Duration(st.HoldLeftAt).Round(time.Second))
	}
	if !st.Deadline.IsZero() {
		fmt.Fprintf(tw, "Deadlines:\tReady by %s, 100%% by %s\n", stamp(st.ReadyDeadline), stamp(st.Deadline))
	}
	tw.Flush()

	if len(st.Steps) > 0 {
		fmt.Fprintln(w, "\nSteps:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		pods := func(int) string { return "" }
		if c := st.Capacity; c != nil && len(c.Stages) == len(st.Steps) {
			// The pods each Revision is bounded to at the stage.
			pods = func(i int) string { return fmt.Sprintf("\t%d / %d", c.Stages[i].Candidate, c.Stages[i].Stable) }
			fmt.Fprintln(tw, "  #\tWEIGHT\tHOLD\tGATE\tSTATE\tSTARTED\tENDED\tPODS (candidate / stable)")
		} else {
			fmt.Fprintln(tw, "  #\tWEIGHT\tHOLD\tGATE\tSTATE\tSTARTED\tENDED")
		}
		for i, s := range st.Steps {
			mark := ""
			if i+1 == st.StepNumber && !st.Phase.Done() {
				mark = "  <- now"
			}
			state := stepState(st, i)
			gate := "-"
			if s.Gate {
				gate = "manual"
				if s.GatePassed {
					gate = "passed"
				}
			}
			fmt.Fprintf(tw, "  %d\t%d%%\t%s\t%s\t%s\t%s\t%s%s%s\n", i+1, s.Weight, s.Hold, gate, state, stamp(s.StartedAt), stamp(s.EndedAt), pods(i), mark)
		}
		tw.Flush()
	}
	if st.Analysis != nil {
		renderAnalysis(w, st)
	}
	if len(st.Commands) > 0 {
		fmt.Fprintln(w, "\nCommands:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range st.Commands {
			line := fmt.Sprintf("  %s\t%s\tby %s\tvia %s", stamp(c.At), c.Name, c.By, c.Via)
			if c.Reason != "" {
				line += "\t" + c.Reason
			}
			if c.Rejected != "" {
				line += "\t(rejected: " + c.Rejected + ")"
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// stepState says where a step stands: done, holding, at its gate, pending,
// cut short (the rollout ended in it) or skipped (it ended before it).
func stepState(st api.Status, i int) string {
	s := st.Steps[i]
	switch {
	case s.Skipped:
		return "skipped"
	case !s.EndedAt.IsZero():
		return "done"
	case i+1 == st.StepNumber && !st.Phase.Done() && st.Phase == api.PhaseGate:
		return "at gate"
	case i+1 == st.StepNumber && !st.Phase.Done() && !s.StartedAt.IsZero():
		if st.Paused {
			return "paused"
		}
		return "holding"
	case !s.StartedAt.IsZero() && st.Phase.Done():
		if i == len(st.Steps)-1 && st.Outcome == api.OutcomeSucceeded {
			return "done"
		}
		return "cut short"
	case st.Phase.Done():
		return "skipped"
	}
	return "pending"
}

// renderAnalysis prints each check's tally and last measurement, then the
// webhook calls at other moments (before start, gate, end).
func renderAnalysis(w io.Writer, st api.Status) {
	an := st.Analysis
	every := ""
	if st.Policy.Analysis != nil {
		every = fmt.Sprintf("every %s, ", st.Policy.Analysis.Interval)
	}
	if ref := st.Policy.AnalysisTemplate; ref != nil {
		every += fmt.Sprintf("from %s %s at version %s, ", ref.Kind(), ref.Name, orNone(ref.Version))
	}
	fmt.Fprintf(w, "\nAnalysis (%s%d rounds):\n", every, an.Rounds)
	var absolute, compared []analysis.Tally
	for _, t := range an.Tallies {
		switch t.Kind {
		case analysis.KindCompare:
			compared = append(compared, t)
		case analysis.KindScore:
			renderScore(w, t)
		default:
			absolute = append(absolute, t)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(absolute) > 0 {
		fmt.Fprintln(tw, "  CHECK\tLAST\tRESULT\tRANGE\tPASSED\tFAILED\tERRORS\tNO DATA\tAT")
	}
	for _, t := range absolute {
		last, result, rng, at := "-", "-", "-", "-"
		if m := t.Last; m != nil {
			result, at = string(m.Result), stamp(m.At)
			switch {
			case m.Value != nil:
				last = analysis.FormatValue(*m.Value)
			case m.StatusCode != 0:
				last = fmt.Sprintf("HTTP %d", m.StatusCode)
			}
			if t.Kind == analysis.KindCheck {
				rng = analysis.Range(m.Min, m.Max)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%d/%d\t%d/%d\t%d/%d\t%s\n", tallyName(t), last, result, rng, t.Passed,
			t.Failures, t.Limits.Failure+1, t.ConsecutiveErrors, t.Limits.ConsecutiveError+1, t.ConsecutiveInconclusives, t.Limits.Inconclusive+1, at)
	}
	tw.Flush()
	if len(absolute) > 0 {
		fmt.Fprintln(w, "  (FAILED, ERRORS and NO DATA show count/what acts: failures roll back; errors and no data in a row pause)")
	}
	renderComparisons(w, compared)
	var hooks []analysis.Measurement
	for _, m := range an.Recent {
		if m.Kind == analysis.KindWebhook && m.Moment != "hold" {
			hooks = append(hooks, m)
		}
	}
	if len(hooks) > 0 {
		fmt.Fprintln(w, "  Webhooks:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, m := range hooks {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", stamp(m.At), m.Moment, m.Summary(), m.Message)
		}
		tw.Flush()
	}
}

func tallyName(t analysis.Tally) string {
	switch {
	case t.Kind == analysis.KindWebhook:
		return t.Name + " (webhook)"
	case t.DryRun:
		return t.Name + " (dry run)"
	}
	return t.Name
}

// renderScore prints the last round's score and how the rounds went.
func renderScore(w io.Writer, t analysis.Tally) {
	if t.Last == nil {
		fmt.Fprintln(w, "  Score: no round yet")
		return
	}
	fmt.Fprintf(w, "  Score: %s", t.Last.Summary())
	if t.Last.Message != "" {
		fmt.Fprintf(w, ": %s", t.Last.Message)
	}
	fmt.Fprintf(w, " — rounds passed %d, marginal or failed %d, without a verdict %d\n", t.Passed, t.Failures, t.Inconclusives)
}

// renderComparisons prints each comparison's last verdict with the figures
// behind it: both sides' medians and sample counts, the shift's estimate
// and interval, the allowed effect and the p-value.
func renderComparisons(w io.Writer, ts []analysis.Tally) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "  Comparisons, candidate against stable over the same window:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHECK\tRESULT\tCANDIDATE\tSTABLE\tSHIFT\tINTERVAL\tALLOWED\tP\tAT")
	var notes []string
	for _, t := range ts {
		m := t.Last
		if m == nil {
			fmt.Fprintf(tw, "  %s\t-\t\t\t\t\t\t\t\n", tallyName(t))
			continue
		}
		cand, stable, shift, interval, allowed, p := "-", "-", "-", "-", "-", "-"
		if c := m.Compare; c != nil {
			cand = fmt.Sprintf("%s (n=%d)", analysis.FormatValue(c.Candidate.Median), c.Candidate.Count)
			stable = fmt.Sprintf("%s (n=%d)", analysis.FormatValue(c.Stable.Median), c.Stable.Count)
			if m.Result == analysis.Passed || m.Result == analysis.Failed {
				shift, interval, allowed, p = analysis.FormatValue(c.Shift), c.Interval(), c.AllowedText(), analysis.FormatValue(c.P)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tallyName(t), m.Result, cand, stable, shift, interval, allowed, p, stamp(m.At))
		if m.Result != analysis.Passed && m.Message != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s\n", t.Name, m.Message))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprint(w, n)
	}
}
