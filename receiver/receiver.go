// Package receiver is sluice's CloudEvents ingress: an HTTP handler that
// turns Knative ApiServerSource events and sluice command events into
// rollout starts, signals and updates, and answers each delivery with the
// status code a broker acts on (2xx done, 4xx do not retry, 5xx/429 retry).
package receiver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

// DefaultMaxBody is the largest event accepted: a Knative object with its
// status is a few KiB; 1 MiB leaves room and bounds memory.
const DefaultMaxBody = 1 << 20

// Receiver handles CloudEvents deliveries.
type Receiver struct {
	Control *control.Client
	Knative knative.Client
	// Gate, if set, answers 503 at once while Temporal is unreachable.
	Gate *Gate
	// Targets, if set, answers target reads from informers' caches, so an
	// event about a target that did not opt in costs no API call.
	Targets *knative.TargetCache
	// Auth authenticates command events, and source events too unless
	// AllowUnauthenticatedSource is set. Nil accepts no command event.
	Auth Authenticator
	// AllowUnauthenticatedSource lets ApiServerSource events in without a
	// token. They are hints: a rollout only starts for an opted-in target's
	// newest Revision, and every object is re-read before it is acted on.
	AllowUnauthenticatedSource bool
	// Namespaces, if not empty, lists the only namespaces events may be about.
	Namespaces map[string]bool
	MaxBody    int64
	Log        *slog.Logger
	Metrics    *Metrics
	Seen       *Seen
	// Now is the clock for latency figures.
	Now func() time.Time
	// MaxLater bounds the offers in flight in the background (0:
	// DefaultMaxLater); see offerLater.
	MaxLater int
	// BackgroundStarts answers a new candidate of a target the caches hold
	// before Temporal has its rollout (offerNew). Set it only where the
	// receiver also sweeps (RunSweeps): the sweep is what offers a candidate
	// whose background offer was lost.
	BackgroundStarts bool
	// warned keeps the policy near misses already logged.
	warned    nearMisses
	laterOnce sync.Once
	laterQ    *later
}

// result is a delivery's answer: its status code, a message for the
// sender, and the outcome label for metrics.
type result struct {
	code    int
	message string
	outcome string
}

func reply(code int, outcome, format string, args ...any) result {
	return result{code: code, outcome: outcome, message: fmt.Sprintf(format, args...)}
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := r.now()
	eventType, res := r.handle(req)
	if res.code == http.StatusServiceUnavailable || res.code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(res.code)
	_, _ = io.WriteString(w, res.message+"\n")
	r.Metrics.observe(eventType, res.outcome, r.now().Sub(start))
	level := slog.LevelDebug
	if res.code >= 400 {
		level = slog.LevelInfo
	}
	r.Log.Log(req.Context(), level, "event", "type", eventType, "code", res.code, "outcome", res.outcome, "message", res.message)
}

func (r *Receiver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Receiver) handle(req *http.Request) (string, result) {
	if req.Method != http.MethodPost {
		return "", reply(http.StatusMethodNotAllowed, "rejected", "POST CloudEvents here")
	}
	limit := r.MaxBody
	if limit <= 0 {
		limit = DefaultMaxBody
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		return "", reply(http.StatusBadRequest, "rejected", "read body: %v", err)
	}
	if int64(len(body)) > limit {
		return "", reply(http.StatusRequestEntityTooLarge, "rejected", "event larger than %d bytes", limit)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	e, err := cehttp.NewEventFromHTTPRequest(req)
	if errors.Is(err, binding.ErrUnknownEncoding) {
		return "", reply(http.StatusUnsupportedMediaType, "rejected", "not a CloudEvent, or a specversion other than 1.0 or 0.3: send binary mode (ce-* headers) or structured mode (application/cloudevents+json)")
	}
	if err != nil {
		return "", reply(http.StatusBadRequest, "invalid", "invalid CloudEvent: %v", err)
	}
	typ := typeLabel(e.Type())
	if err := e.Validate(); err != nil {
		return typ, reply(http.StatusBadRequest, "invalid", "invalid CloudEvent: %v", err)
	}
	key := e.Source() + "\x00" + e.ID()
	if r.Seen.Has(key) {
		return typ, reply(http.StatusOK, "duplicate", "duplicate of an event already handled (source %s, id %s)", e.Source(), e.ID())
	}
	// A command's sender is authenticated before its payload is read: an
	// anonymous caller learns nothing of what a valid command holds.
	command := events.IsCommand(e.Type())
	principal, res, ok := r.authenticate(req, command)
	if !ok {
		return typ, res
	}
	action, err := events.Map(*e)
	var inv *events.InvalidError
	if errors.As(err, &inv) {
		return typ, reply(http.StatusBadRequest, "invalid", "%s", inv.Reason)
	}
	if action.Kind == events.KindIgnore {
		return typ, reply(http.StatusOK, "ignored", "ignored: %s", action.Reason)
	}
	if len(r.Namespaces) > 0 && !r.Namespaces[action.Namespace] {
		return typ, reply(http.StatusForbidden, "forbidden", "namespace %q is not served by this receiver", action.Namespace)
	}
	res = r.dispatch(req.Context(), *e, action, principal)
	if res.code < 300 {
		r.Seen.Add(key)
	}
	return typ, res
}

func (r *Receiver) authenticate(req *http.Request, command bool) (string, result, bool) {
	if !command && r.AllowUnauthenticatedSource {
		return "apiserversource", result{}, true
	}
	token := bearerToken(req)
	if r.Auth == nil {
		return "", reply(http.StatusUnauthorized, "unauthorized", "this receiver has no authentication configured, so it accepts no command events"), false
	}
	if token == "" {
		return "", reply(http.StatusUnauthorized, "unauthorized", "%v", errNoToken), false
	}
	principal, err := r.Auth.Authenticate(req.Context(), token)
	if err != nil {
		return "", reply(http.StatusUnauthorized, "unauthorized", "token rejected: %v", err), false
	}
	return principal, result{}, true
}

// typeLabel keeps metric labels bounded: unknown types count as "other".
func typeLabel(t string) string {
	switch t {
	case events.TypeResourceAdd, events.TypeResourceUpdate, events.TypeResourceDelete,
		events.TypeRefAdd, events.TypeRefUpdate, events.TypeRefDelete,
		events.TypeRequest, events.TypePromote, events.TypePause, events.TypeResume, events.TypeAbort, events.TypeUndo:
		return t
	}
	return "other"
}
