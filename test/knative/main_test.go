// Package knative runs sluice's Knative rules against Knative Serving's own
// admission webhook, built unmodified from knative.dev/serving: a
// kube-apiserver with Knative's CRDs, ConfigMaps and webhook configurations,
// calling the real webhook, which runs in a network namespace of its own
// (see stack.Bridge), and Knative's own controller in another. No pods run
// here (no scheduler, no nodes): Revisions are created but never Ready, so
// the tests that need a Ready one write it themselves.
package knative

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/sluicehq/sluice/test/stack"
)

var (
	stk *stack.Stack
	kn  servingclient.Interface
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fail := func(err error) int {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "knative:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "knative: skipped:", err)
		return 0
	}
	tools, err := stack.ToolsFromEnv()
	if err != nil {
		return fail(err)
	}
	servingDir := os.Getenv("SLUICE_SERVING_DIR")
	if servingDir == "" {
		return fail(fmt.Errorf("SLUICE_SERVING_DIR is not set: run the tests with `make test`, which builds Knative Serving's components"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bridge, err := stack.NewBridge(ctx)
	if err != nil {
		return fail(err)
	}
	defer bridge.Close()
	dir, err := os.MkdirTemp("", "sluice-knative-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := start(ctx, dir, tools, bridge, servingDir); err != nil {
		fmt.Fprintln(os.Stderr, "knative: start:", err)
		if stk != nil {
			fmt.Fprintln(os.Stderr, stk.Logs())
			stk.Stop()
		}
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, stk.Logs())
	}
	stk.Stop()
	return code
}

// start runs the API server on the bridge and Knative's own webhook beside
// it (stack.StartKnativeWebhook).
func start(ctx context.Context, dir string, tools stack.Tools, bridge *stack.Bridge, servingDir string) error {
	root, err := stack.RepoRoot(".")
	if err != nil {
		return err
	}
	mods, err := stack.FindKnativeModules(ctx, root)
	if err != nil {
		return err
	}
	stk, err = stack.Start(ctx, stack.Options{
		Dir: dir, Tools: tools, ControlPlaneOnly: true, APIServerAddress: bridge.Host, AggregatorRouting: true,
		CRDDirs: []string{filepath.Join(mods.Serving, "config", "core", "300-resources")},
		Log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	kn = stk.Serving
	if err := stk.StartKnativeWebhook(ctx, bridge, 2, servingDir, mods); err != nil {
		return err
	}
	return stk.StartKnativeController(ctx, bridge, 3, servingDir)
}
