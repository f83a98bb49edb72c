package stack

// Temporal: the dev server the rollouts run on.

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// eagerActivities is Temporal's dynamic setting that lets the answer to a
// workflow task carry the activity tasks it scheduled on the same queue
// (go.temporal.io/server's dynamicconfig.EnableActivityEagerExecution; off
// by default). sluice's worker asks for it on every activity, as the SDK
// does by default.
const eagerActivities = "system.enableActivityEagerExecution"

// devServerDynamicConfig is the dev server's flags for its dynamic
// configuration: what the production topology's file holds.
func devServerDynamicConfig(o Options) []string {
	if o.NoEagerActivities {
		return nil
	}
	return []string{"--dynamic-config-value", eagerActivities + "=true"}
}

func (s *Stack) startTemporal(ctx context.Context) error {
	if s.opts.Temporal != "" {
		s.TemporalAddr, s.sluiceTemporal = s.opts.Temporal, s.opts.Temporal
		return nil
	}
	if s.opts.TemporalCluster {
		return s.startTemporalCluster(ctx)
	}
	port := s.opts.TemporalPort
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		port = p
	}
	args := append([]string{"server", "start-dev", "--ip", "127.0.0.1", "--port", fmt.Sprint(port), "--log-level", "warn"},
		devServerDynamicConfig(s.opts)...)
	if !s.opts.TemporalInMemory {
		args = append(args, "--db-filename", filepath.Join(s.opts.Dir, "temporal.db"))
	}
	if s.opts.UI && s.opts.UIPort == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		s.opts.UIPort = p
	}
	if s.opts.UIPort != 0 {
		args = append(args, "--ui-port", fmt.Sprint(s.opts.UIPort))
		s.UIURL = fmt.Sprintf("http://127.0.0.1:%d", s.opts.UIPort)
	} else {
		args = append(args, "--headless")
	}
	s.TemporalAddr = fmt.Sprintf("127.0.0.1:%d", port)
	s.sluiceTemporal = s.TemporalAddr
	if s.opts.Via != nil {
		var err error
		if s.sluiceTemporal, err = s.opts.Via("temporal", s.TemporalAddr); err != nil {
			return err
		}
	}
	var err error
	s.temporal, err = startProc(s.opts.Dir, "temporal", nil, s.opts.Tools.Temporal, args...)
	if err != nil {
		return err
	}
	return s.temporalReady(ctx)
}

// temporalReady waits for the dev server to answer; `sluice setup` is both
// the readiness check and the search attributes' registration.
func (s *Stack) temporalReady(ctx context.Context) error {
	return waitFor(ctx, s.temporal, "Temporal dev server", 60*time.Second, func() error {
		out, err := exec.CommandContext(ctx, s.opts.Tools.Sluice, "setup", "--address", s.TemporalAddr).CombinedOutput()
		if err != nil {
			return fmt.Errorf("sluice setup: %v: %s", err, out)
		}
		return nil
	})
}

// TemporalPids are the process IDs of Temporal: the dev server's, or each
// service's and PostgreSQL's postmaster in the production topology (its
// backends are the postmaster's children).
func (s *Stack) TemporalPids() []int {
	var pids []int
	for _, p := range append([]*proc{s.temporal}, s.cluster.procs()...) {
		if p != nil {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	return pids
}

// TemporalCluster reports whether Temporal runs in its production topology
// (Options.TemporalCluster) rather than as the dev server.
func (s *Stack) TemporalCluster() bool { return s.cluster != nil }
