package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// KnativeCRDDirs finds Knative's CRD YAML in the module cache: Serving's
// through sluice's own module (at root), Eventing's through the tools module
// that builds its adapter.
func KnativeCRDDirs(ctx context.Context, root string) ([]string, error) {
	serving, err := moduleDir(ctx, root, "knative.dev/serving")
	if err != nil {
		return nil, err
	}
	eventing, err := moduleDir(ctx, filepath.Join(root, "test", "tools", "eventing"), "knative.dev/eventing")
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(serving, "config", "core", "300-resources"), filepath.Join(eventing, "config", "core", "resources")}, nil
}

// ModuleDir is where the Go module cache holds module, as the module in dir
// requires it.
func ModuleDir(ctx context.Context, dir, module string) (string, error) {
	return moduleDir(ctx, dir, module)
}

func moduleDir(ctx context.Context, dir, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("find module %s from %s: %w", module, dir, err)
	}
	d := strings.TrimSpace(string(out))
	if d == "" {
		return "", fmt.Errorf("module %s is not downloaded; run `go mod download` in %s", module, dir)
	}
	return d, nil
}

// RepoRoot finds sluice's module root above dir (go itself walks up to go.mod).
func RepoRoot(dir string) (string, error) {
	cmd := exec.Command("go", "env", "GOMOD")
	cmd.Dir = dir
	out, err := cmd.Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("no go.mod above %s: run this from a clone of sluice", dir)
	}
	return filepath.Dir(gomod), nil
}

// ForTest gives a test what a stack needs from this machine: the tools, the
// repository's root and Knative's CRD directories. Without the tools it
// skips the test, except in CI (CI set), where it fails it.
func ForTest(ctx context.Context, t testing.TB) (tools Tools, root string, crds []string) {
	t.Helper()
	tools, err := ToolsFromEnv()
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if root, err = RepoRoot("."); err != nil {
		t.Fatal(err)
	}
	if crds, err = KnativeCRDDirs(ctx, root); err != nil {
		t.Fatal(err)
	}
	return tools, root, crds
}
