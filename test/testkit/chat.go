package testkit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// ChatRequest is one request a Chat stand-in received.
type ChatRequest struct {
	Path string
	Body string
	// Form is the body decoded, for Slack's form-encoded Web API calls.
	Form url.Values
}

// Chat stands in for the chat services notifications reach, answering as
// each documents: Slack's Web API (any path ending in /chat.postMessage),
// a Microsoft Teams incoming webhook (paths under /teams/, which answer
// "1") and any other webhook (204).
type Chat struct {
	URL string
	// Fail refuses this many requests first (503).
	Fail int

	mu  sync.Mutex
	got []ChatRequest
}

// NewChat starts a Chat stand-in, stopped when t ends.
func NewChat(t testing.TB) *Chat {
	c := &Chat{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *Chat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail > 0 {
		c.Fail--
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	req := ChatRequest{Path: r.URL.Path, Body: string(b)}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		req.Form, _ = url.ParseQuery(string(b))
	}
	c.got = append(c.got, req)
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat.postMessage"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true,"channel":"C024BE91L","ts":"1503435956.000247"}`)
	case strings.HasPrefix(r.URL.Path, "/teams/"):
		_, _ = io.WriteString(w, "1") // what Office 365 connectors answer
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// Requests returns what the stand-in received, in order.
func (c *Chat) Requests() []ChatRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ChatRequest(nil), c.got...)
}

// Split sorts requests into Slack messages, Teams cards and other webhook
// calls.
func Split(reqs []ChatRequest) (slack, teams, other []ChatRequest) {
	for _, r := range reqs {
		switch {
		case strings.HasSuffix(r.Path, "/chat.postMessage"):
			slack = append(slack, r)
		case strings.HasPrefix(r.Path, "/teams/"):
			teams = append(teams, r)
		default:
			other = append(other, r)
		}
	}
	return slack, teams, other
}
