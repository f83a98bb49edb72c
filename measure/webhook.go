package measure

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/analysis"
)

// Hook is one webhook call: where, how long each attempt may take, and how
// many times to retry a failure.
type Hook struct {
	URL     string        `json:"url"`
	Timeout time.Duration `json:"timeout"`
	Retries int           `json:"retries"`
}

// MaxBackoff caps the pause between webhook attempts.
const MaxBackoff = 30 * time.Second

// Webhooks calls webhooks.
type Webhooks struct {
	HTTP *http.Client
	// Backoff is the pause between attempts; it doubles each time.
	Backoff time.Duration
}

// Call posts p to h, retrying a failure h.Retries times. The measurement is
// Passed on a 2xx answer and Failed otherwise (a refused connection, a
// timeout or another status); the message says which.
func (w Webhooks) Call(ctx context.Context, h Hook, p analysis.Payload) analysis.Measurement {
	m := analysis.Measurement{Name: p.Name, Kind: analysis.KindWebhook, Moment: p.Moment, Result: analysis.Failed}
	body, err := json.Marshal(p)
	if err != nil {
		m.Message = "encode payload: " + err.Error()
		return m
	}
	client := w.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	backoff := w.Backoff
	if backoff <= 0 {
		backoff = time.Second
	}
	for attempt := 0; attempt <= h.Retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				m.Message += "; gave up: " + ctx.Err().Error()
				return m
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, MaxBackoff)
		}
		m.Attempts = attempt + 1
		code, answer, err := post(ctx, client, h, body)
		m.StatusCode = code
		switch {
		case err != nil:
			m.Message = err.Error()
		case code >= 200 && code < 300:
			m.Result, m.Message = analysis.Passed, answer
			return m
		default:
			m.Message = fmt.Sprintf("HTTP %d: %s", code, answer)
		}
	}
	return m
}

func post(ctx context.Context, client *http.Client, h Hook, body []byte) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("call %s: %w", h.URL, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, excerpt(answer), nil
}
