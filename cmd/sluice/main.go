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

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/workflows/control"
)

// Exit codes, documented in the README so scripts can branch on them.
const (
	exitOK       = 0
	exitError    = 1 // could not do what was asked (bad flags, unreachable Temporal or cluster)
	exitRejected = 3 // the rollout refused the command; the reason is printed
	exitNotFound = 4 // the target has no rollout
	// A rollout waited for (start --wait, status --watch) ended without succeeding.
	exitRolledBack = 5
	exitAborted    = 6
	exitFailed     = 7
	exitSuperseded = 8
	exitTimeout    = 9 // status --watch --timeout passed first
	// lint: some document has findings, or its input could not be read.
	exitFindings = 1
	exitInput    = 2
)

// codedError carries an exit code of its own (lint's).
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// inputErr is an input that could not be read or parsed (exit 2).
func inputErr(err error) error { return &codedError{code: exitInput, err: err} }

var outcomeCodes = map[api.Outcome]int{
	api.OutcomeRolledBack: exitRolledBack,
	api.OutcomeAborted:    exitAborted,
	api.OutcomeFailed:     exitFailed,
	api.OutcomeSuperseded: exitSuperseded,
}

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
	var coded *codedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &coded):
		fmt.Fprintln(stderr, "error:", coded.err)
		return coded.code
	case errors.As(err, &rejected):
		fmt.Fprintln(stderr, "rejected:", rejected.Reason)
		return exitRejected
	case errors.As(err, &outcome):
		fmt.Fprintln(stderr, outcome.Error())
		if code, ok := outcomeCodes[outcome.outcome]; ok {
			return code
		}
		return exitFailed
	case errors.Is(err, errWatchTimeout):
		fmt.Fprintln(stderr, err)
		return exitTimeout
	case errors.Is(err, control.ErrNoRollout):
		fmt.Fprintln(stderr, "error:", err)
		return exitNotFound
	}
	fmt.Fprintln(stderr, "error:", err)
	return exitError
}
