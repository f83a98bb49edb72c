// Package integration runs sluice against a real Temporal server: the
// Temporal CLI's dev server (built by test/tools/install.sh), a real sluice
// worker, and the CLI's control client.
package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/test/testkit"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
)

// sluiceBin is the sluice binary built for these tests.
var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-it-")
	if err != nil {
		panic(err)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "github.com/sluicehq/sluice/cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// temporalServer starts the dev server for one test and stops it after. Its
// log is printed if the test fails.
// toolBin is the tool the environment variable env names. Without it the
// test is skipped, or fails under CI, where `make test` must have set it.
func toolBin(t testing.TB, env, what string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: run the tests with `make test`, which builds %s", env, what)
		}
		t.Skipf("%s is not set; `make test` builds %s and sets it", env, what)
	}
	return bin
}

func temporalServer(t testing.TB) client.Options {
	t.Helper()
	bin := toolBin(t, "SLUICE_TEMPORAL_BIN", "the Temporal CLI")
	var serverLog bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  bin,
		LogLevel:      "warn",
		Stdout:        &serverLog,
		Stderr:        &serverLog,
		ClientOptions: &client.Options{Namespace: "default", Logger: testkit.TemporalLogger()},
	})
	if err != nil {
		t.Fatalf("start Temporal dev server %s: %v", bin, err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Logf("stop dev server: %v", err)
		}
		if t.Failed() {
			t.Logf("Temporal dev server log:\n%s", tail(serverLog.String(), 4000))
		}
	})
	return client.Options{HostPort: srv.FrontendHostPort(), Namespace: "default"}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// eventually polls f until it returns true or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
