// Command sluice-dev runs the local stack (test/stack) and walks through a
// rollout on it (test/demo): what `make demo` runs. It is a program of its
// own so that the sluice binary users install carries none of the stack.
//
//	sluice-dev [--unattended] [--temporal-port 7233] [--ui-port 8233]
//
// Run it from a clone of sluice through `make demo`, which builds the tools it
// needs. With --unattended (or SLUICE_DEMO_UNATTENDED=1) it promotes by
// itself and exits 0 only if every expected outcome was observed. The stack
// runs Knative's components in network namespaces: it needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/test/demo"
	"github.com/sluicehq/sluice/test/stack"
)

func main() {
	unattended := flag.Bool("unattended", os.Getenv("SLUICE_DEMO_UNATTENDED") == "1", "promote without waiting for a person, check every outcome, exit")
	temporalPort := flag.Int("temporal-port", 7233, "Temporal dev server port (0: a free one)")
	uiPort := flag.Int("ui-port", 8233, "Temporal UI port (0: a free one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *unattended, *temporalPort, *uiPort)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, unattended bool, temporalPort, uiPort int) error {
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		return err
	}
	root, err := stack.RepoRoot(".")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sluice-demo-")
	if err != nil {
		return err
	}
	err = demo.Run(ctx, demo.Options{
		Unattended: unattended, Dir: dir, Tools: tools, Root: root,
		TemporalPort: temporalPort, UIPort: uiPort, Out: os.Stdout,
	})
	if err == nil || ctx.Err() != nil {
		os.RemoveAll(dir)
		return nil
	}
	return fmt.Errorf("%w\n(the stack's logs are in %s)", err, dir)
}
