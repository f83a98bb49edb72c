package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// FlaggerUser is who Flagger is to the API server (its audit log): the
// ServiceAccount of Flagger's own manifests.
const FlaggerUser = "system:serviceaccount:flagger-system:flagger"

// StartFlagger runs Flagger with its Knative provider against the stack,
// for the side-by-side benchmark: its Canary CRD and its ServiceAccount and
// RBAC from its own manifests (kustomize/base/flagger in its module, at
// dir: the ones that grant its Knative provider its rights),
// its process with that account's token. Flagger needs a Prometheus only
// for metric checks, which the benchmark's canaries have none of: it is
// given an address that answers nothing, and says so once in its log.
func (s *Stack) StartFlagger(ctx context.Context, bin, dir string) (pid int, err error) {
	if _, err := s.kubectl(ctx, "create", "namespace", "flagger-system"); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		return 0, err
	}
	for _, f := range []string{"crd.yaml", "account.yaml", "rbac.yaml"} {
		if _, err := s.kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(dir, "kustomize", "base", "flagger", f)); err != nil {
			return 0, fmt.Errorf("apply Flagger's %s: %w", f, err)
		}
	}
	if err := s.waitEstablished(ctx, "canaries.flagger.app"); err != nil {
		return 0, err
	}
	token, err := s.kubectl(ctx, "create", "token", "flagger", "-n", "flagger-system", "--duration", "48h")
	if err != nil {
		return 0, err
	}
	kubeconfig := filepath.Join(s.opts.Dir, "flagger.kubeconfig")
	if err := writeKubeconfig(kubeconfig, s.KubeURL, strings.TrimSpace(token)); err != nil {
		return 0, err
	}
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	p, err := startProc(s.opts.Dir, "flagger", nil, bin, "-kubeconfig", kubeconfig, "-mesh-provider", "knative",
		"-metrics-server", "http://127.0.0.1:1", "-port", fmt.Sprint(port), "-log-level", "info", "-namespace", Namespace,
		"-enable-config-tracking=false")
	if err != nil {
		return 0, err
	}
	s.extra = append(s.extra, p)
	if err := waitFor(ctx, p, "flagger", 60*time.Second, httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))); err != nil {
		return 0, err
	}
	return p.cmd.Process.Pid, nil
}
