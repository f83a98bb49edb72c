package stack

// sluice's own processes (worker, receiver, its admission webhooks) and
// the ApiServerSource adapter that sends them events.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// StartWorker starts (or restarts) the sluice worker process (with
// Options.Controller, the controller).
func (s *Stack) StartWorker(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.WorkerHTTP = fmt.Sprintf("127.0.0.1:%d", port)
	if s.opts.Controller {
		return s.startController(ctx)
	}
	s.worker, err = startProc(s.opts.Dir, "worker", s.workerEnv(), s.opts.Tools.Sluice, "worker", "--http-addr", s.WorkerHTTP)
	if err != nil {
		return err
	}
	return waitFor(ctx, s.worker, "sluice worker", 30*time.Second, httpOK("http://"+s.WorkerHTTP+"/readyz"))
}

func (s *Stack) workerEnv() []string {
	env := append([]string{"KUBECONFIG=" + s.workerKubeconfig, "TEMPORAL_ADDRESS=" + s.sluiceTemporal, "SLUICE_CLUSTER=" + s.opts.Cluster}, s.opts.WorkerEnv...)
	if s.PrometheusURL != "" {
		env = append(env, "SLUICE_PROMETHEUS_URL="+s.PrometheusURL)
	}
	if s.opts.ProgressSink != "" {
		env = append(env, "K_SINK="+s.opts.ProgressSink)
	}
	if s.UIURL != "" {
		env = append(env, "SLUICE_TEMPORAL_UI="+s.UIURL) // the Rollout resources' links
	}
	if s.opts.DeployDir != "" {
		// As the Deployment sets it: the worker's own namespace.
		env = append(env, "SLUICE_NOTIFICATIONS_NAMESPACE=sluice-system")
	}
	return env
}

// AddWorker starts one more sluice worker process on the same task queue,
// as scaling out does in a cluster, and returns its pid and its name (for
// Kill and Restart). It stops with the stack.
func (s *Stack) AddWorker(ctx context.Context) (int, string, error) {
	port, err := freePort()
	if err != nil {
		return 0, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	name := fmt.Sprintf("worker-%d", len(s.extra))
	p, err := s.run(ctx, name, s.workerEnv(), httpOK("http://"+addr+"/readyz"), s.opts.Tools.Sluice, "worker", "--http-addr", addr)
	if err != nil {
		return 0, "", err
	}
	return p.cmd.Process.Pid, name, nil
}

// KillWorker kills the worker with SIGKILL, as a crash would.
func (s *Stack) KillWorker() { s.worker.kill() }

// StartReceiver starts (or restarts) the sluice receiver process on the
// same address (with Options.Controller, the controller, unless it runs).
func (s *Stack) StartReceiver(ctx context.Context) error {
	if s.opts.Controller {
		if s.receiver != nil {
			if done, _ := s.receiver.exited(); !done {
				return nil
			}
		}
		return s.StartWorker(ctx)
	}
	env, addr, err := s.receiverEnv()
	if err != nil {
		return err
	}
	s.receiver, err = startProc(s.opts.Dir, "receiver", env, s.opts.Tools.Sluice, "receiver", "--listen", addr)
	if err != nil {
		return err
	}
	return waitFor(ctx, s.receiver, "sluice receiver", 30*time.Second, httpOK(s.ReceiverURL+"readyz"))
}

// startController starts `sluice controller` as both the worker and the
// receiver, on WorkerHTTP and the receiver's address.
func (s *Stack) startController(ctx context.Context) error {
	env, addr, err := s.receiverEnv()
	if err != nil {
		return err
	}
	env = append(env, s.workerEnv()...) // the worker's kubeconfig is the controller's
	p, err := startProc(s.opts.Dir, "controller", env, s.opts.Tools.Sluice, "controller", "--http-addr", s.WorkerHTTP, "--listen", addr)
	if err != nil {
		return err
	}
	s.worker, s.receiver = p, p
	if err := waitFor(ctx, p, "sluice controller", 30*time.Second, httpOK("http://"+s.WorkerHTTP+"/readyz")); err != nil {
		return err
	}
	return waitFor(ctx, p, "sluice controller", 30*time.Second, httpOK(s.ReceiverURL+"readyz"))
}

// receiverEnv is the receiver's environment and address, choosing them
// (and the command token) the first time.
func (s *Stack) receiverEnv() ([]string, string, error) {
	if s.ReceiverURL == "" {
		port, err := freePort()
		if err != nil {
			return nil, "", err
		}
		s.ReceiverURL = fmt.Sprintf("http://127.0.0.1:%d/", port)
		s.ReceiverToken = randomToken()
		if err := os.WriteFile(filepath.Join(s.opts.Dir, "receiver-tokens"), []byte("stack "+s.ReceiverToken+"\n"), 0o600); err != nil {
			return nil, "", err
		}
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(s.ReceiverURL, "http://"), "/")
	env := append([]string{"KUBECONFIG=" + s.receiverKubeconfig, "TEMPORAL_ADDRESS=" + s.sluiceTemporal, "SLUICE_CLUSTER=" + s.opts.Cluster,
		"SLUICE_RECEIVER_TOKENS_FILE=" + filepath.Join(s.opts.Dir, "receiver-tokens")}, s.opts.ReceiverEnv...)
	if s.admissionPort != 0 {
		env = append(env, fmt.Sprintf("SLUICE_ADMISSION_ADDR=127.0.0.1:%d", s.admissionPort), "SLUICE_ADMISSION_HOSTS=127.0.0.1")
		// The policy webhook judges with the worker's defaults, as the
		// deployed receiver reads the worker's sluice-defaults ConfigMap.
		for _, kv := range s.workerEnv() {
			if strings.HasPrefix(kv, "SLUICE_DEFAULT_") || strings.HasPrefix(kv, "SLUICE_PROMETHEUS_URL=") || strings.HasPrefix(kv, "SLUICE_KNATIVE_METRICS=") {
				env = append(env, kv)
			}
		}
	}
	return env, addr, nil
}

// InstallAdmissionWebhook applies config/deploy's admission webhook
// configurations (the mutating one and the policy webhook) with one change:
// the API server calls the stack's receiver at its loopback address (the
// configurations as deployed name the receiver's Service, which nothing here
// serves). They are applied as `kubectl apply --server-side` applies
// config/deploy, so either applies over the other; the caBundle stays the
// receiver's.
func (s *Stack) InstallAdmissionWebhook(ctx context.Context) error {
	for _, file := range []string{"520-admission-webhook.yaml", "521-policy-webhook.yaml"} {
		raw, err := os.ReadFile(filepath.Join(s.opts.DeployDir, file))
		if err != nil {
			return err
		}
		var cfg struct {
			APIVersion string           `json:"apiVersion"`
			Kind       string           `json:"kind"`
			Metadata   json.RawMessage  `json:"metadata"`
			Webhooks   []map[string]any `json:"webhooks"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("read the admission webhook configuration %s: %w", file, err)
		}
		for _, wh := range cfg.Webhooks {
			cc, _ := wh["clientConfig"].(map[string]any)
			svc, _ := cc["service"].(map[string]any)
			path, _ := svc["path"].(string)
			wh["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", s.admissionPort, path)}
		}
		out, err := json.Marshal(&cfg)
		if err != nil {
			return err
		}
		applied := filepath.Join(s.opts.Dir, strings.TrimSuffix(file, ".yaml")+".json")
		if err := os.WriteFile(applied, out, 0o600); err != nil {
			return err
		}
		if _, err := s.kubectl(ctx, "apply", "--server-side", "-f", applied); err != nil {
			return err
		}
	}
	return nil
}

// StopReceiver stops the receiver: events sent meanwhile are lost.
func (s *Stack) StopReceiver() { s.receiver.stop(5 * time.Second) }

func (s *Stack) startAdapter(ctx context.Context) error {
	sinkURL := s.ReceiverURL
	if s.opts.Via != nil {
		var err error
		if sinkURL, err = s.opts.Via("events", s.ReceiverURL); err != nil {
			return err
		}
	}
	return s.StartAdapter(ctx, sinkURL)
}

// StartAdapter runs Knative Eventing's ApiServerSource adapter as an
// ApiServerSource of Revisions and Services in Namespace (Resource mode)
// would, sending to sink. Its probe port is hard-coded (8080), so on a stack
// with network namespaces it runs in one of its own, where a loopback sink
// is forwarded to this machine's.
func (s *Stack) StartAdapter(ctx context.Context, sinkURL string) error {
	cfg, _ := json.Marshal(map[string]any{
		"namespaces": []string{Namespace}, "allNamespaces": false, "mode": "Resource",
		"resources": []map[string]any{
			{"gvr": map[string]string{"Group": "serving.knative.dev", "Version": "v1", "Resource": "revisions"}},
			{"gvr": map[string]string{"Group": "serving.knative.dev", "Version": "v1", "Resource": "services"}},
		},
	})
	env := []string{"K_SINK=" + sinkURL, "NAMESPACE=" + Namespace, "NAME=sluice-stack", "K_COMPONENT=apiserversource",
		"K_SOURCE_CONFIG=" + string(cfg)}
	args := []string{s.opts.Tools.Adapter, "--kubeconfig=" + s.Kubeconfig}
	if s.bridge != nil {
		name, _, err := s.bridge.Namespace(ctx, netnsAdapter)
		if err != nil {
			return err
		}
		sink, err := url.Parse(sinkURL)
		if err != nil {
			return fmt.Errorf("the adapter's sink %q: %w", sinkURL, err)
		}
		if ip := net.ParseIP(sink.Hostname()); sink.Hostname() == "localhost" || ip != nil && ip.IsLoopback() {
			if err := s.bridge.Forward(name, sink.Host); err != nil {
				return err
			}
		}
		args = append(Exec(name), args...)
	}
	var err error
	s.adapter, err = startProc(s.opts.Dir, "apiserversource", env, args[0], args[1:]...)
	if err != nil {
		return err
	}
	// The adapter has no readiness endpoint of its own worth trusting here;
	// give it a moment to list and watch, and make sure it did not die.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	if done, err := s.adapter.exited(); done {
		return fmt.Errorf("ApiServerSource adapter exited (%v):\n%s", err, s.adapter.tail(3000))
	}
	return nil
}

// ReplaceSluice runs sluice's worker and receiver from the binary bin from
// now on, replacing the running ones as a Deployment's rolling update
// replaces pods: the new worker polls before the old one stops (SIGTERM:
// its tasks in flight finish, or Temporal gives them to the new one). The
// receiver has one address here, so it stops and starts again at once; in
// a cluster its Service would hold both for a moment, and the adapter
// retries an event it could not deliver. It returns how long the worker's
// replacement took, new up to old gone.
func (s *Stack) ReplaceSluice(ctx context.Context, bin string) (time.Duration, error) {
	begin := time.Now()
	if s.opts.Controller {
		// One address for both halves: the old one stops first.
		s.worker.stop(15 * time.Second)
		s.opts.Tools.Sluice = bin
		err := s.StartWorker(ctx)
		return time.Since(begin), err
	}
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	next, err := startProc(s.opts.Dir, "worker", s.workerEnv(), bin, "worker", "--http-addr", addr)
	if err != nil {
		return 0, err
	}
	if err := waitFor(ctx, next, "sluice worker "+bin, 30*time.Second, httpOK("http://"+addr+"/readyz")); err != nil {
		next.kill()
		return 0, err
	}
	old := s.worker
	s.worker, s.WorkerHTTP, s.opts.Tools.Sluice = next, addr, bin
	old.stop(15 * time.Second)
	took := time.Since(begin)
	s.receiver.stop(5 * time.Second)
	return took, s.StartReceiver(ctx)
}

// Sluice is the binary sluice's worker and receiver run from now.
func (s *Stack) Sluice() string { return s.opts.Tools.Sluice }

// WorkerPID is the process ID of the stack's worker, which its Temporal
// identity begins with.
func (s *Stack) WorkerPID() int { return s.worker.cmd.Process.Pid }
