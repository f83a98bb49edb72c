package stack

// What a test reads of the stack's processes when it measures or fails:
// process IDs, peak memory, log tails, and the readiness probes.

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Pids are the process IDs of the worker and the receiver, for reading
// their CPU time and memory from /proc. With Options.Controller the worker's
// is the controller's and the receiver's 0, so that nothing is counted twice.
func (s *Stack) Pids() (worker, receiver int) {
	if s.receiver == s.worker {
		return s.worker.cmd.Process.Pid, 0
	}
	return s.worker.cmd.Process.Pid, s.receiver.cmd.Process.Pid
}

// ProcessPids names every running process of the stack with its process ID,
// for a benchmark to read what each one used.
func (s *Stack) ProcessPids() map[string]int {
	out := map[string]int{}
	for _, p := range s.procs() {
		if p == nil {
			continue
		}
		if done, _ := p.exited(); !done {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

func (s *Stack) procs() []*proc {
	ps := append([]*proc{s.etcd, s.apiserver, s.controllerManager, s.scheduler, s.kwok, s.temporal, s.worker, s.receiver, s.adapter, s.prometheus}, s.cluster.procs()...)
	return append(ps, s.extra...)
}

// PeakRSS lists each running process's peak resident memory (VmHWM), as
// "name 123 MiB", largest first, with the sum last.
func (s *Stack) PeakRSS() string {
	type row struct {
		name string
		kib  int64
	}
	var rows []row
	var total int64
	for _, p := range s.procs() {
		if p == nil || p.cmd.Process == nil {
			continue
		}
		if kib, ok := statusKiB(p.cmd.Process.Pid, "VmHWM:"); ok {
			rows = append(rows, row{p.name, kib})
			total += kib
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].kib > rows[j].kib })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %d MiB", r.name, r.kib/1024))
	}
	return strings.Join(append(parts, fmt.Sprintf("total %d MiB", total/1024)), ", ")
}

// Logs returns the end of every component's log, for a failed test.
func (s *Stack) Logs() string {
	var b strings.Builder
	for _, p := range s.procs() {
		if p != nil {
			fmt.Fprintf(&b, "==== %s (%s)\n%s\n", p.name, p.logPath, p.tail(4000))
		}
	}
	return b.String()
}

// httpsOK is httpOK for a server with a self-signed certificate.
func httpsOK(url string) func() error {
	return getOK(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}, url)
}

// httpOK passes once GET url answers 200.
func httpOK(url string) func() error { return getOK(http.DefaultClient, url) }

func getOK(hc *http.Client, url string) func() error {
	return func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
