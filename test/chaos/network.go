// Package chaos runs many rollouts on the local stack while a seeded fault
// injector kills, restarts, delays and cuts what is around them, then
// checks invariants over every rollout: from Temporal's record of how each
// ended, the API server's audit log of every write, and the progress
// events received. See docs/reliability.md.
package chaos

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/test/stack"
)

// network puts sluice's links to the API server and to Temporal through a
// real toxiproxy server (run in this process, driven through its own HTTP
// client), and the ApiServerSource adapter's events through eventFaults.
type network struct {
	client  *toxiclient.Client
	proxies map[string]*toxiclient.Proxy
	events  *eventFaults
	srv     *http.Server
}

func startNetwork(seed uint64) (*network, error) {
	port, err := stack.FreePort()
	if err != nil {
		return nil, err
	}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	go api.Listen("127.0.0.1", strconv.Itoa(port))
	n := &network{client: toxiclient.NewClient(fmt.Sprintf("127.0.0.1:%d", port)), proxies: map[string]*toxiclient.Proxy{}}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := n.client.Proxies(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("toxiproxy's API did not answer: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.events = &eventFaults{rng: rand.New(rand.NewPCG(seed, 3)), hc: &http.Client{Timeout: 10 * time.Second}}
	return n, nil
}

// via is stack.Options.Via: a toxiproxy proxy for each server, the
// events' forwarder for the receiver.
func (n *network) via(name, addr string) (string, error) {
	if name == "events" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		n.events.target = addr
		n.srv = &http.Server{Handler: n.events, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = n.srv.Serve(ln) }()
		return "http://" + ln.Addr().String() + "/", nil
	}
	port, err := stack.FreePort()
	if err != nil {
		return "", err
	}
	p, err := n.client.CreateProxy(name, fmt.Sprintf("127.0.0.1:%d", port), addr)
	if err != nil {
		return "", fmt.Errorf("toxiproxy: proxy for %s: %w", name, err)
	}
	n.proxies[name] = p
	return p.Listen, nil
}

func (n *network) close() {
	if n.srv != nil {
		_ = n.srv.Close()
	}
	_ = n.client.ResetState()
	for _, p := range n.proxies {
		_ = p.Delete()
	}
}

// eventFaults forwards CloudEvents (binary mode, as the adapter sends them)
// to the receiver, and on the way drops some, sends some twice, and holds
// some back for up to 3 s, so they arrive after later ones. What it did is
// counted.
type eventFaults struct {
	target string
	hc     *http.Client

	mu      sync.Mutex
	rng     *rand.Rand
	counts  map[string]int
	enabled bool
	// trail is what became of each event, by the name of the object it is
	// about: evidence for a rollout that never started or ended.
	trail map[string][]string
}

// note records what became of an event about an object.
func (f *eventFaults) note(h http.Header, what string) {
	subject := h.Get("Ce-Subject")
	name := subject[strings.LastIndex(subject, "/")+1:]
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trail == nil {
		f.trail = map[string][]string{}
	}
	f.trail[name] = append(f.trail[name], time.Now().Format("15:04:05.000")+" "+strings.TrimPrefix(h.Get("Ce-Type"), "dev.knative.apiserver.resource.")+" "+what)
}

// Trail lists what became of the events about an object.
func (f *eventFaults) Trail(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.trail[name]...)
}

// set turns the faults on or off (the forwarder passes everything when off).
func (f *eventFaults) set(on bool) {
	f.mu.Lock()
	f.enabled = on
	f.mu.Unlock()
}

func (f *eventFaults) decide() (what string, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	what = "passed"
	if f.enabled {
		switch r := f.rng.Float64(); {
		case r < 0.05:
			what = "dropped"
		case r < 0.15:
			what = "duplicated"
		case r < 0.30:
			what, delay = "delayed", time.Duration(f.rng.Int64N(int64(3*time.Second)))
		}
	}
	f.counts[what]++
	return what, delay
}

// Counts says how many events met each fate.
func (f *eventFaults) Counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.counts {
		out[k] = v
	}
	return out
}

func (f *eventFaults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	what, delay := f.decide()
	switch what {
	case "dropped":
		// Lost on the way, and the sender told it arrived.
		f.note(r.Header, "dropped")
		w.WriteHeader(http.StatusAccepted)
		return
	case "delayed":
		w.WriteHeader(http.StatusAccepted)
		go func() {
			time.Sleep(delay)
			f.forward(r.Header, body, fmt.Sprintf("delayed %s", delay.Round(time.Millisecond)))
		}()
		return
	case "duplicated":
		go f.forward(r.Header, body, "duplicate")
	}
	code, err := f.forward(r.Header, body, what)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(code)
}

// forward sends the event on, and notes the receiver's answer.
func (f *eventFaults) forward(h http.Header, body []byte, what string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, f.target, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = h.Clone()
	resp, err := f.hc.Do(req)
	if err != nil {
		f.note(h, what+": "+err.Error())
		return 0, err
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	f.note(h, fmt.Sprintf("%s: %d %s", what, resp.StatusCode, strings.TrimSpace(string(answer))))
	return resp.StatusCode, nil
}
