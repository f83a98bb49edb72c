package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Pod template annotations that steer how kwok plays a Revision's pods.
// Knative copies a Revision's annotations onto its pods, so they go on the
// Service's (or Configuration's) template.
const (
	// AnnotationReadyAfter delays the pods' readiness, e.g. "3s".
	AnnotationReadyAfter = "sim.sluice.dev/ready-after"
	// AnnotationFail makes the user container crash with exit code 1, as
	// a broken image would: Knative reports ContainerHealthy=False, ExitCode1.
	AnnotationFail = "sim.sluice.dev/fail"
	// AnnotationNeverReady keeps the containers running but never ready, as
	// a failing readiness probe would: Knative reports
	// ProgressDeadlineExceeded once config-deployment's progress-deadline
	// (ProgressDeadline here) passes.
	AnnotationNeverReady = "sim.sluice.dev/never-ready"
)

// ProgressDeadline is config-deployment's progress-deadline on the stack:
// how long Knative waits for a Revision's pods before it fails it.
const ProgressDeadline = 15 * time.Second

// PodCIDR is where kwok takes pod IPs from. Only the autoscaler's network
// namespace routes it, to the data plane's stand-in (see startDataPlane).
const PodCIDR = "10.244.0.0/16"

// kwokNode is the one fake node the stack's pods are scheduled on.
const kwokNode = "kwok-node-0"

// kwokStages are the pod stages sluice adds to kwok's own: a crashing
// container and one that never becomes ready.
const kwokStages = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sluice-pod-crash
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
    - {key: '.metadata.annotations["sim.sluice.dev/fail"]', operator: In, values: ["true"]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        restartCount: 3
        {{ if eq .name "queue-proxy" }}
        state: {running: {startedAt: {{ $now | Quote }}}}
        {{ else }}
        state: {waiting: {reason: CrashLoopBackOff, message: "back-off restarting failed container"}}
        lastState: {terminated: {exitCode: 1, reason: Error, message: "sluice stack: this Revision's container exits (sim.sluice.dev/fail)", startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}
        {{ end }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: sluice-pod-never-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
    - {key: '.metadata.annotations["sim.sluice.dev/never-ready"]', operator: In, values: ["true"]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        restartCount: 0
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
`

// kwokConfig is the KwokConfiguration: only the stack's own node, every
// parallelism option set (v0.8.0 refuses zeros), pod IPs from PodCIDR.
const kwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageAllNodes: false
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  cidr: 10.244.0.1/16
  nodeIP: 10.244.255.254
  serverAddress: %s
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 4
  nodeLeaseDurationSeconds: 40
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 4
  enablePodsOnNodeSyncListPager: false
  enablePodsOnNodeSyncStreamWatch: false
`

// startKwok runs kwok with one fake node. Its stages are kwok's own (node
// initialize and heartbeat, pod ready and delete, read from the kwok module)
// with pod-ready narrowed to pods no sluice annotation steers elsewhere and
// delayed by AnnotationReadyAfter, plus sluice's kwokStages.
func (s *Stack) startKwok(ctx context.Context) error {
	dir, err := moduleDir(ctx, filepath.Join(s.opts.Root, "test", "tools", "kwok"), "sigs.k8s.io/kwok")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	docs := []string{fmt.Sprintf(kwokConfig, fmt.Sprintf("127.0.0.1:%d", port))}
	stages := filepath.Join(dir, "kustomize", "stage")
	for _, f := range []string{"node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", "pod/fast/pod-delete.yaml"} {
		b, err := os.ReadFile(filepath.Join(stages, f))
		if err != nil {
			return fmt.Errorf("read kwok's stage: %w", err)
		}
		docs = append(docs, string(b))
	}
	ready, err := podReadyStage(filepath.Join(stages, "pod", "fast", "pod-ready.yaml"))
	if err != nil {
		return err
	}
	docs = append(docs, ready, kwokStages)
	path := filepath.Join(s.opts.Dir, "kwok.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		return err
	}
	kube := s.Kube()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kwokNode,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		Labels:      map[string]string{"kubernetes.io/hostname": kwokNode, "type": "kwok"}}}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the fake node: %w", err)
	}
	s.kwok, err = startProc(s.opts.Dir, "kwok", nil, filepath.Join(s.opts.Tools.KwokDir, "kwok"),
		"--kubeconfig", s.Kubeconfig, "--config", path)
	if err != nil {
		return err
	}
	return waitFor(ctx, s.kwok, "kwok", 60*time.Second, func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, kwokNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s is not Ready yet", kwokNode)
	})
}

// podReadyStage is kwok's pod-ready stage, narrowed to pods that neither
// AnnotationFail nor AnnotationNeverReady claims, and delayed by
// AnnotationReadyAfter where a pod carries it.
func podReadyStage(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read kwok's pod-ready stage: %w", err)
	}
	var st map[string]any
	if err := yaml.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("read kwok's pod-ready stage: %w", err)
	}
	spec, _ := st["spec"].(map[string]any)
	sel, _ := spec["selector"].(map[string]any)
	if sel == nil {
		return "", fmt.Errorf("kwok's pod-ready stage %s has no selector", path)
	}
	exprs, _ := sel["matchExpressions"].([]any)
	for _, a := range []string{AnnotationFail, AnnotationNeverReady} {
		exprs = append(exprs, map[string]any{"key": fmt.Sprintf(".metadata.annotations[%q]", a), "operator": "DoesNotExist"})
	}
	sel["matchExpressions"] = exprs
	spec["delay"] = map[string]any{
		"durationMilliseconds": 0,
		"durationFrom":         map[string]any{"expressionFrom": fmt.Sprintf(".metadata.annotations[%q]", AnnotationReadyAfter)},
	}
	out, err := yaml.Marshal(st)
	return string(out), err
}
