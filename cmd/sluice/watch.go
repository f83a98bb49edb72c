package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

var errWatchTimeout = errors.New("the rollout had not ended when --timeout passed")

// watchStatus follows a rollout until it ends. On a terminal it redraws the
// status view in place; otherwise it prints one line per change, which
// reads well in CI logs.
func watchStatus(cmd *cobra.Command, c *control.Client, target knative.TargetRef, st api.Status, timeout time.Duration) error {
	out := cmd.OutOrStdout()
	f, isFile := out.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	last := ""
	for {
		if tty {
			var b strings.Builder
			renderStatus(&b, st)
			fmt.Fprint(out, "\033[H\033[2J"+b.String())
		} else if line := watchLine(st); line != last {
			fmt.Fprintf(out, "%s %s\n", st.AsOf.UTC().Format("15:04:05"), line)
			last = line
		}
		if st.Phase.Done() {
			return outcomeErr(st.Outcome)
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-deadline:
			return errWatchTimeout
		case <-time.After(500 * time.Millisecond):
		}
		next, err := c.Status(cmd.Context(), target)
		if err != nil {
			return err
		}
		st = next
	}
}

// watchLine is one line that changes whenever the rollout moves.
func watchLine(st api.Status) string {
	s := fmt.Sprintf("%s %s", st.Candidate, st.Shown)
	if st.StepNumber > 0 && !st.Phase.Done() {
		s += fmt.Sprintf(" step %d/%d at %d%%", st.StepNumber, st.StepCount, st.Weight)
	}
	if st.Paused {
		s += " (" + st.PauseReason + ")"
	}
	if st.Outcome != "" {
		s += ": " + st.Reason
	}
	return s + " | " + knative.FormatTraffic(st.Live)
}
