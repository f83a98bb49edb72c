package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Knative's components need addresses the API server can call that are not
// loopback (an EndpointSlice may not hold one, and Knative's webhook refuses
// a URL client config), and several bind the same hard-coded ports (8080).
// So the stack gives each such component a network namespace of its own on
// a bridge: a private /24 with no route off the machine. It needs root.

// ErrNeedsRoot is why a stack cannot start without root.
var ErrNeedsRoot = errors.New("the Knative stack runs its components in network namespaces (ip netns), which needs root: run as root")

// Bridge is a Linux bridge on a private /24; Host is its own address.
type Bridge struct {
	name   string
	prefix string // "10.213.7"
	Host   string

	mu        sync.Mutex
	netns     []string
	links     []string
	listeners []net.Listener
}

// NewBridge makes a bridge on 10.213.<n>.0/24 for a random n, so stacks of
// several test packages at once do not collide.
func NewBridge(ctx context.Context) (*Bridge, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("the Knative stack needs the ip command (Debian's iproute2): %w", err)
	}
	// A /24 no address on this machine is in yet (one left behind by a
	// killed run would make two bridges answer for the same addresses).
	addrs, _ := exec.CommandContext(ctx, "ip", "-o", "addr", "show").Output()
	id := make([]byte, 2)
	for try := 0; ; try++ {
		_, _ = rand.Read(id)
		if !strings.Contains(string(addrs), fmt.Sprintf(" 10.213.%d.", id[0])) || try > 50 {
			break
		}
	}
	b := &Bridge{name: "slbr" + hex.EncodeToString(id), prefix: fmt.Sprintf("10.213.%d", id[0])}
	b.Host = b.prefix + ".1"
	if err := b.ip(ctx, "link", "add", b.name, "type", "bridge"); err != nil {
		return nil, err
	}
	b.links = append(b.links, b.name)
	if err := b.ip(ctx, "addr", "add", b.Host+"/24", "dev", b.name); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.ip(ctx, "link", "set", b.name, "up"); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Namespace adds network namespace number n (2..254) on the bridge and
// returns its name and address.
func (b *Bridge) Namespace(ctx context.Context, n int) (name, addr string, err error) {
	name = fmt.Sprintf("%s-%d", b.name, n)
	addr = b.Addr(n)
	host, peer := b.hostLink(n), b.peerLink(n)
	steps := [][]string{
		{"netns", "add", name},
		{"link", "add", host, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", name},
		{"link", "set", host, "master", b.name},
		{"link", "set", host, "up"},
		{"netns", "exec", name, "ip", "addr", "add", addr + "/24", "dev", peer},
		{"netns", "exec", name, "ip", "link", "set", peer, "up"},
		{"netns", "exec", name, "ip", "link", "set", "lo", "up"},
	}
	for i, s := range steps {
		if err := b.ip(ctx, s...); err != nil {
			return "", "", err
		}
		b.mu.Lock()
		switch i {
		case 0:
			b.netns = append(b.netns, name)
		case 1:
			b.links = append(b.links, host)
		}
		b.mu.Unlock()
	}
	return name, addr, nil
}

func (b *Bridge) hostLink(n int) string { return fmt.Sprintf("%sv%d", b.name, n) }

// peerLink is the name of namespace n's own end of its link to the bridge.
func (b *Bridge) peerLink(n int) string { return fmt.Sprintf("%sp%d", b.name, n) }

// RemoveNamespace deletes namespace number n and its link to the bridge.
func (b *Bridge) RemoveNamespace(ctx context.Context, n int) error {
	name, host := fmt.Sprintf("%s-%d", b.name, n), b.hostLink(n)
	// Deleting the namespace deletes the link pair with it.
	err := b.ip(ctx, "netns", "del", name)
	b.mu.Lock()
	b.netns = slices.DeleteFunc(b.netns, func(s string) bool { return s == name })
	b.links = slices.DeleteFunc(b.links, func(s string) bool { return s == host })
	b.mu.Unlock()
	return err
}

// In runs ip with args inside namespace name, e.g. a route.
func (b *Bridge) In(ctx context.Context, name string, args ...string) error {
	return b.ip(ctx, append([]string{"netns", "exec", name, "ip"}, args...)...)
}

// Listen opens a TCP listener inside namespace name: this process serves
// there without a process of its own.
func (b *Bridge) Listen(name, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNamespace(name, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// DialContext dials TCP from inside namespace name, for an http.Transport:
// this process then reaches what only that namespace routes to.
func (b *Bridge) DialContext(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNamespace(name, func() (err error) {
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// inNamespace runs fn on a thread switched into network namespace name. A
// socket belongs to the namespace it was made in, so only the making needs
// to happen there. The thread is switched back before it is let go: a
// thread that exits would take with it every child process it once started
// (Pdeathsig is per thread), and Go threads run any goroutine over time.
func inNamespace(name string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer home.Close()
		f, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter network namespace %s: %w", name, err)
			return
		}
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			// Back home: the thread may serve others again. Otherwise it
			// stays locked, and Go retires it with this goroutine.
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// Addr is the address of namespace number n.
func (b *Bridge) Addr(n int) string { return fmt.Sprintf("%s.%d", b.prefix, n) }

// Exec is how to run bin inside namespace name: prefix it with these.
func Exec(name string) []string { return []string{"ip", "netns", "exec", name} }

// Close removes the namespaces and links it made.
func (b *Bridge) Close() {
	ctx := context.Background()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ln := range b.listeners {
		_ = ln.Close()
	}
	for _, n := range b.netns {
		_ = b.ip(ctx, "netns", "del", n)
	}
	for i := len(b.links) - 1; i >= 0; i-- {
		_ = b.ip(ctx, "link", "del", b.links[i])
	}
}

func (b *Bridge) ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Forward makes addr (a loopback host:port of this machine) reachable at the
// same host:port inside namespace name, for a component there that is
// handed a loopback URL. It stops when the stack's bridge closes.
func (b *Bridge) Forward(name, addr string) error {
	ln, err := b.Listen(name, addr)
	if err != nil {
		return fmt.Errorf("forward %s into %s: %w", addr, name, err)
	}
	b.mu.Lock()
	b.listeners = append(b.listeners, ln)
	b.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go pipe(in, addr)
		}
	}()
	return nil
}

// pipe copies a connection both ways to addr, dialled from this machine.
func pipe(in net.Conn, addr string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}
