// Package knative runs sluice's Knative rules against Knative Serving's own
// admission webhook, built unmodified from knative.dev/serving: a
// kube-apiserver with Knative's CRDs, ConfigMaps and webhook configurations,
// calling the real webhook, which runs in a network namespace of its own
// (see stack.Bridge). Only the webhook runs: no controller, so no Revision
// is created or reconciled here; the tests write what they need.
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

// start runs the API server on the bridge, installs Knative Serving's own
// resources, and runs its webhook in a network namespace, reachable through
// a selector-less Service with a hand-written EndpointSlice (what a
// Deployment's pod would give it in a cluster).
func start(ctx context.Context, dir string, tools stack.Tools, bridge *stack.Bridge, servingDir string) error {
	root, err := stack.RepoRoot(".")
	if err != nil {
		return err
	}
	toolsMod := filepath.Join(root, "test", "tools", "serving")
	mods := map[string]string{}
	for _, m := range []string{"knative.dev/serving", "knative.dev/networking", "knative.dev/caching"} {
		if mods[m], err = stack.ModuleDir(ctx, toolsMod, m); err != nil {
			return err
		}
	}
	sv, nw := mods["knative.dev/serving"], mods["knative.dev/networking"]
	stk, err = stack.Start(ctx, stack.Options{
		Dir: dir, Tools: tools, ControlPlaneOnly: true, APIServerAddress: bridge.Host, AggregatorRouting: true,
		CRDDirs: []string{filepath.Join(sv, "config", "core", "300-resources")},
		Log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	kn = stk.Serving
	kubectl := func(args ...string) error { _, err := stk.Kubectl(ctx, args...); return err }
	if err := kubectl("create", "namespace", "knative-serving"); err != nil {
		return err
	}
	// Knative's validation dry-runs a Pod as the namespace's default
	// ServiceAccount, which kube-controller-manager would create.
	if err := kubectl("create", "serviceaccount", "default", "-n", "default"); err != nil {
		return err
	}
	// The rest of Knative's 12 CRDs (networking's, caching's Image), its
	// ConfigMaps and its webhook configurations, unmodified.
	steps := [][]string{
		{"apply", "--server-side", "-f", filepath.Join(nw, "config", "certificate.yaml"), "-f", filepath.Join(nw, "config", "domain-claim.yaml"),
			"-f", filepath.Join(nw, "config", "ingress.yaml"), "-f", filepath.Join(nw, "config", "serverlessservice.yaml"),
			"-f", filepath.Join(mods["knative.dev/caching"], "config", "image.yaml")},
		{"apply", "-f", filepath.Join(sv, "config", "core", "configmaps"), "-f", filepath.Join(nw, "config", "config-network.yaml")},
		{"apply", "-f", filepath.Join(sv, "config", "core", "webhooks")},
	}
	for _, s := range steps {
		if err := kubectl(s...); err != nil {
			return err
		}
	}
	name, addr, err := bridge.Namespace(ctx, 2)
	if err != nil {
		return err
	}
	endpoints := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"webhook","namespace":"knative-serving"},
"spec":{"ports":[{"name":"https-webhook","port":443,"targetPort":8443}]}}
{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"webhook-stack","namespace":"knative-serving",
"labels":{"kubernetes.io/service-name":"webhook"}},"addressType":"IPv4","ports":[{"name":"https-webhook","port":8443,"protocol":"TCP"}],
"endpoints":[{"addresses":["%s"],"conditions":{"ready":true}}]}`, addr)
	path := filepath.Join(dir, "webhook-endpoints.json")
	if err := os.WriteFile(path, []byte(endpoints), 0o600); err != nil {
		return err
	}
	if err := kubectl("apply", "-f", path); err != nil {
		return err
	}
	env := []string{"SYSTEM_NAMESPACE=knative-serving", "CONFIG_LOGGING_NAME=config-logging", "CONFIG_OBSERVABILITY_NAME=config-observability",
		"POD_NAME=webhook-stack", "WEBHOOK_NAME=webhook", "WEBHOOK_PORT=8443"}
	args := append(stack.Exec(name), filepath.Join(servingDir, "webhook"), "--kubeconfig", stk.Kubeconfig)
	// Ready once the API server gets Knative's answer through it: a
	// dry-run create of a Service whose traffic sums to 90 is refused.
	return stk.Run(ctx, "knative-webhook", env, func() error {
		err := dryRunCreate(ctx, "ready-check", traffic(latest(90, "")))
		if err == nil {
			return fmt.Errorf("the webhook has not refused a Service whose traffic sums to 90 yet")
		}
		if !refusedByKnative(err) {
			return err
		}
		return nil
	}, args[0], args[1:]...)
}
