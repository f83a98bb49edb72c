package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/version"
)

// versionInfo is `sluice version -o json`: this CLI, and the workers that
// poll its task queue with whether this CLI may talk to them.
type versionInfo struct {
	Version string            `json:"version"`
	Go      string            `json:"go"`
	Deps    map[string]string `json:"dependencies,omitempty"`
	// Workers is nil with --client; Unreachable says why it is empty
	// when Temporal could not be asked.
	Workers     []workerVersion `json:"workers,omitempty"`
	TaskQueue   string          `json:"taskQueue,omitempty"`
	Unreachable string          `json:"unreachable,omitempty"`
}

type workerVersion struct {
	Identity   string `json:"identity"`
	Program    string `json:"program,omitempty"`
	Version    string `json:"version,omitempty"`
	Compatible bool   `json:"compatible"`
	Why        string `json:"why"`
}

func newVersionCommand(g *globals) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print sluice's version, and the versions of the workers this CLI talks to",
		Long: `Print this CLI's version and the versions it was built with, then ask Temporal
which workers poll the task queue and say, for each, whether this CLI may
command and read its rollouts (the compatibility promise in docs/operations.md:
the same major version, release lines at most one minor apart). With --client,
or when Temporal cannot be reached within 5s, only the CLI's version is shown.`,
		Example: "  sluice version\n  sluice version --client\n  sluice version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(g.output); err != nil {
				return err
			}
			info := versionInfo{Version: version.Version, Go: version.Go(), Deps: deps()}
			if !clientOnly {
				askWorkers(cmd.Context(), g, &info)
			}
			return printAs(cmd.OutOrStdout(), g.output, info, func(w io.Writer) { printVersion(w, info, clientOnly) })
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "show this CLI's version only; do not ask Temporal")
	return withOutput(cmd)
}

// deps are the versions of the libraries whose protocols sluice speaks.
func deps() map[string]string {
	out := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			switch dep.Path {
			case "go.temporal.io/sdk", "knative.dev/serving", "github.com/cloudevents/sdk-go/v2", "k8s.io/client-go":
				out[dep.Path] = dep.Version
			}
		}
	}
	return out
}

func askWorkers(ctx context.Context, g *globals, info *versionInfo) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, closeFn, err := g.dial(ctx)
	if err != nil {
		info.Unreachable = err.Error()
		return
	}
	defer closeFn()
	info.TaskQueue = c.TaskQueue
	ids, err := c.Workers(ctx, c.TaskQueue)
	if err != nil {
		info.Unreachable = err.Error()
		return
	}
	info.Workers = []workerVersion{}
	for _, id := range ids {
		wv := workerVersion{Identity: id, Why: "not a sluice build that names its version (before v0.1.0?)"}
		if p, v, ok := version.FromIdentity(id); ok {
			wv.Program, wv.Version = p, v
			wv.Compatible, wv.Why = version.Compatible(version.Version, v)
		}
		info.Workers = append(info.Workers, wv)
	}
}

func printVersion(w io.Writer, info versionInfo, clientOnly bool) {
	fmt.Fprintf(w, "sluice %s (%s)\n", info.Version, info.Go)
	for _, p := range slices.Sorted(maps.Keys(info.Deps)) {
		fmt.Fprintf(w, "  %s %s\n", p, info.Deps[p])
	}
	switch {
	case clientOnly:
	case info.Unreachable != "":
		fmt.Fprintf(w, "workers: not asked: %s\n", info.Unreachable)
	case len(info.Workers) == 0:
		fmt.Fprintf(w, "workers: none polls task queue %s\n", info.TaskQueue)
	default:
		fmt.Fprintf(w, "workers on task queue %s:\n", info.TaskQueue)
		for _, wv := range info.Workers {
			fmt.Fprintf(w, "  %s  %s\n", wv.Identity, wv.Why)
		}
	}
}
