// Package eventsink is a CloudEvents sink for tests: an HTTP server that
// keeps every event delivered to it, as a Knative Broker or a chat bridge
// receiving sluice's progress events would.
package eventsink

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Sink collects events; it answers 400 to a request that is not one.
type Sink struct {
	URL    string
	mu     sync.Mutex
	events []cloudevents.Event
}

// New starts a sink that stops when the test ends.
func New(t testing.TB) *Sink {
	s, stop := Start()
	t.Cleanup(stop)
	return s
}

// Start starts a sink; call stop when done.
func Start() (*Sink, func()) {
	s := &Sink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.events = append(s.events, *e)
		s.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	s.URL = srv.URL
	return s, srv.Close
}

// Events returns the events received so far, in arrival order.
func (s *Sink) Events() []cloudevents.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cloudevents.Event(nil), s.events...)
}

// Has reports whether an event of type typ arrived.
func (s *Sink) Has(typ string) bool {
	for _, e := range s.Events() {
		if e.Type() == typ {
			return true
		}
	}
	return false
}
