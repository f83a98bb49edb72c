package stack

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process of the stack, with its output in a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	mu      sync.Mutex
	err     error
	// dir, env, bin and args start it again (respawn).
	dir, bin  string
	env, args []string
	// as, if set, is the user it runs as (PostgreSQL refuses root).
	as *syscall.Credential
	// term stops it and crash kills it: SIGTERM and SIGKILL unless set.
	term, crash syscall.Signal
}

func startProc(dir, name string, env []string, bin string, args ...string) (*proc, error) {
	return (&proc{dir: dir, name: name, env: env, bin: bin, args: args}).start()
}

// start runs the command p describes, as the user and with the signals it
// names; it returns a new proc, since a proc's done closes only once.
func (p *proc) start() (*proc, error) {
	dir, name, env, bin, args := p.dir, p.name, p.env, p.bin, p.args
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a stop reaches its children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.as}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	np := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{}), dir: dir, bin: bin, env: env, args: args,
		as: p.as, term: p.term, crash: p.crash}
	go func() {
		err := cmd.Wait()
		f.Close()
		np.mu.Lock()
		np.err = err
		np.mu.Unlock()
		close(np.done)
	}()
	return np, nil
}

// respawn starts the same command again, appending to the same log; p must
// have ended.
func (p *proc) respawn() (*proc, error) { return p.start() }

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits up to grace, then kills.
func (p *proc) stop(grace time.Duration) {
	if p == nil {
		return
	}
	if done, _ := p.exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, cmpSignal(p.term, syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// kill sends SIGKILL, as a crash would, and waits for the end.
func (p *proc) kill() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, cmpSignal(p.crash, syscall.SIGKILL))
	<-p.done
}

// staysUp is the readiness of a process with none of its own to check: it
// must at least not exit within its first second.
func (p *proc) staysUp(ctx context.Context) error {
	select {
	case <-p.done:
		_, err := p.exited()
		return fmt.Errorf("%s exited as it started (%v); its log:\n%s", p.name, err, p.tail(3000))
	case <-time.After(time.Second):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func cmpSignal(set, def syscall.Signal) syscall.Signal {
	if set != 0 {
		return set
	}
	return def
}

// tail returns the end of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	s := string(b)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls check until it succeeds, the process dies, or timeout passes.
func waitFor(ctx context.Context, p *proc, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p != nil {
			if done, err := p.exited(); done {
				return fmt.Errorf("%s exited while starting (%v); its log:\n%s", p.name, err, p.tail(3000))
			}
		}
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	msg := fmt.Sprintf("%s not ready after %s: %v", what, timeout, last)
	if p != nil {
		msg += "\nits log:\n" + p.tail(3000)
	}
	return fmt.Errorf("%s", strings.TrimSpace(msg))
}

// FreePort asks the kernel for a free loopback port, for a proxy beside the stack.
func FreePort() (int, error) { return freePort() }
