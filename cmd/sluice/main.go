// Command sluice runs and steers durable progressive rollouts for Knative
// Serving: `sluice worker` runs them, the other verbs start, watch and steer them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/cmd/sluice/control"
)

// Exit codes, documented in the README so scripts can branch on them.
const (
	exitOK       = 0
	exitError    = 1 // could not do what was asked (bad flags, unreachable Temporal or cluster)
	exitRejected = 3 // the rollout refused the command; the reason is printed
	exitNotFound = 4 // the target has no rollout
	exitOutcome  = 5 // start --wait: the rollout ended without succeeding
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCommand().ExecuteContext(ctx)
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err for a person and maps it to the documented exit code.
func exitCode(err error, stderr io.Writer) int {
	var rejected *control.RejectedError
	var outcome *outcomeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &rejected):
		fmt.Fprintln(stderr, "rejected:", rejected.Reason)
		return exitRejected
	case errors.As(err, &outcome):
		fmt.Fprintln(stderr, outcome.Error())
		return exitOutcome
	case errors.Is(err, control.ErrNoRollout):
		fmt.Fprintln(stderr, "error:", err)
		return exitNotFound
	}
	fmt.Fprintln(stderr, "error:", err)
	return exitError
}
