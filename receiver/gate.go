package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
)

// Gate knows whether Temporal is reachable, from a probe that runs in the
// background, so an event that arrives while it is not is answered 503 at
// once. ApiServerSource delivers events one at a time: a delivery that
// waited out the Temporal client's retries (seconds each) would stall every
// event behind it, where an immediate 503 hands the event to the source's
// own retry and backoff.
type Gate struct {
	// Check asks Temporal whether it is serving (client.CheckHealth).
	Check func(context.Context) error
	// Every is how often Check runs (default 1s); Timeout bounds each
	// (default 1s).
	Every, Timeout time.Duration

	mu   sync.Mutex
	down error
	at   time.Time
}

// Run probes until ctx ends.
func (g *Gate) Run(ctx context.Context) {
	every := g.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		g.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *Gate) probe(ctx context.Context) {
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := g.Check(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		g.down = nil
		return
	}
	if g.down == nil {
		g.at = time.Now()
	}
	g.down = err
}

// Err is nil while Temporal is reachable; otherwise it says since when it
// is not, and why. A nil Gate is always open.
func (g *Gate) Err() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down == nil {
		return nil
	}
	return serviceerror.NewUnavailable(fmt.Sprintf("unreachable since %s: %v", g.at.UTC().Format(time.RFC3339), g.down))
}

// Failed closes the gate after a call found Temporal unavailable, until the
// next probe succeeds: the events behind it need not each find out again.
func (g *Gate) Failed(err error) {
	var unavailable *serviceerror.Unavailable
	if g == nil || !(errors.As(err, &unavailable) || errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down == nil {
		g.at = time.Now()
		g.down = err
	}
}
