package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startControllerManager runs kube-controller-manager: Deployments,
// ReplicaSets, ServiceAccounts, garbage collection and the rest, as in any
// cluster. It signs ServiceAccount tokens with the API server's key.
func (s *Stack) startControllerManager(ctx context.Context) error {
	flags, _, err := s.controllerFlags()
	if err != nil {
		return err
	}
	s.controllerManager, err = startProc(s.opts.Dir, "kube-controller-manager", nil, filepath.Join(s.opts.Tools.KubeDir, "kube-controller-manager"),
		append(flags, "--cert-dir", filepath.Join(s.opts.Dir, "kcm-pki"),
			"--service-account-private-key-file", filepath.Join(s.opts.Dir, "sa.key"),
			"--use-service-account-credentials=false",
			// Knative's Deployments answer in seconds only if their controllers do.
			"--concurrent-deployment-syncs", "10", "--concurrent-replicaset-syncs", "10", "--kube-api-qps", "200", "--kube-api-burst", "400")...)
	if err != nil {
		return err
	}
	kube := s.Kube()
	// Ready once it has made the default namespace's ServiceAccount, which
	// every pod (and Knative's validation dry-run) needs.
	return waitFor(ctx, s.controllerManager, "kube-controller-manager", 60*time.Second, func() error {
		_, err := kube.CoreV1().ServiceAccounts(Namespace).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// startScheduler runs kube-scheduler, which places pods on kwok's node.
func (s *Stack) startScheduler(ctx context.Context) error {
	flags, port, err := s.controllerFlags()
	if err != nil {
		return err
	}
	s.scheduler, err = startProc(s.opts.Dir, "kube-scheduler", nil, filepath.Join(s.opts.Tools.KubeDir, "kube-scheduler"), flags...)
	if err != nil {
		return err
	}
	return waitFor(ctx, s.scheduler, "kube-scheduler", 60*time.Second, httpsOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port)))
}

// controllerFlags are what kube-controller-manager and kube-scheduler share:
// the administrator's kubeconfig for everything, their own health port on
// loopback, no leader election (one of each).
func (s *Stack) controllerFlags() (flags []string, port int, err error) {
	if port, err = freePort(); err != nil {
		return nil, 0, err
	}
	return []string{"--kubeconfig", s.Kubeconfig, "--authentication-kubeconfig", s.Kubeconfig, "--authorization-kubeconfig", s.Kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port), "--leader-elect=false", "--v", "0"}, port, nil
}
