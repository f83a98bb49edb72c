package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The components Kill and Restart take, by name: each is also its log's name.
const (
	Worker            = "worker"
	Receiver          = "receiver"
	Temporal          = "temporal"
	APIServer         = "kube-apiserver"
	KnativeController = "knative-controller"
	Adapter           = "apiserversource"
)

// Kill kills a component with SIGKILL, as a crash would. Besides the names
// above, a worker AddWorker started is named by its log ("worker-3"), and
// the production-shaped Temporal's parts by theirs (TemporalHistory, …;
// PostgreSQL gets an immediate shutdown, its own crash).
func (s *Stack) Kill(name string) error {
	p := s.find(name)
	if p == nil {
		return fmt.Errorf("no component %q in the stack", name)
	}
	p.kill()
	return nil
}

// Restart starts a killed component again, with the same command, ports and
// data (the dev server on its database file, the API server on etcd), and
// returns once it answers as it did at start.
func (s *Stack) Restart(ctx context.Context, name string) error {
	switch name {
	case Worker:
		return s.StartWorker(ctx)
	case Receiver:
		return s.StartReceiver(ctx)
	}
	p := s.find(name)
	if p == nil {
		return fmt.Errorf("no component %q in the stack", name)
	}
	if done, _ := p.exited(); !done {
		return fmt.Errorf("%s is still running", name)
	}
	if s.cluster != nil && slices.Contains(s.cluster.procs(), p) {
		return s.restartClusterPart(ctx, name, p)
	}
	np, err := p.respawn()
	if err != nil {
		return err
	}
	switch name {
	case Temporal:
		s.temporal = np
		return s.temporalReady(ctx)
	case APIServer:
		s.apiserver = np
		return waitFor(ctx, np, name, 60*time.Second, s.apiServerReady(s.Rest.BearerToken))
	case Adapter:
		s.adapter = np
	}
	for i, e := range s.extra {
		if e == p {
			s.extra[i] = np
		}
	}
	// The others have no readiness of their own to wait on here.
	return np.staysUp(ctx)
}

// Exited reports whether a component's process has exited: one that
// crashed on its own, which a kubelet would start again.
func (s *Stack) Exited(name string) bool {
	p := s.find(name)
	if p == nil {
		return false
	}
	done, _ := p.exited()
	return done
}

func (s *Stack) find(name string) *proc {
	if s.opts.Controller && (name == Worker || name == Receiver) {
		return s.worker // the controller is both
	}
	for _, p := range s.procs() {
		if p != nil && p.name == name {
			return p
		}
	}
	return nil
}

// Log returns a component's log so far, by name ("apiserversource",
// "worker", ...).
func (s *Stack) Log(name string) string {
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, name+".log"))
	if err != nil {
		return ""
	}
	return string(b)
}
