package receiver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/workflows/control"
)

const goodToken = "pipeline-token-0123456789"

// env is a receiver over a fake Temporal and a fake Knative cluster, served
// on a real HTTP server.
type env struct {
	t        *testing.T
	temporal *fakeTemporal
	k        *knativefake.Cluster
	rcv      *Receiver
	srv      *httptest.Server
	reg      *prometheus.Registry
	issuer   *issuer
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	ft := &fakeTemporal{
		signalFn: func(string, string) error { return serviceerror.NewNotFound("workflow not found") },
		describe: func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			return nil, serviceerror.NewNotFound("workflow not found")
		},
		update: func(name string) (string, error) { return name + " done", nil },
	}
	iss := newIssuer(t)
	oidcAuth, err := NewOIDC(context.Background(), iss.srv.URL, "sluice-receiver")
	if err != nil {
		t.Fatal(err)
	}
	tokens := &StaticTokens{}
	tokens.Add("pipeline", goodToken)
	reg := prometheus.NewRegistry()
	rcv := &Receiver{
		Control:                    &control.Client{Temporal: ft, TaskQueue: "q", Identity: "sluice-receiver"},
		Knative:                    knative.Client{Serving: knativefake.New(objs...)},
		Auth:                       AnyOf(tokens, oidcAuth),
		AllowUnauthenticatedSource: true,
		Namespaces:                 map[string]bool{"default": true, "shop": true},
		MaxBody:                    DefaultMaxBody,
		Log:                        slog.New(slog.DiscardHandler),
		Metrics:                    NewMetrics(reg),
		Seen:                       NewSeen(1000, time.Minute),
	}
	e := &env{t: t, temporal: ft, rcv: rcv, reg: reg, issuer: iss}
	e.k = rcv.Knative.Serving.(*knativefake.Cluster)
	e.srv = httptest.NewServer(rcv)
	t.Cleanup(e.srv.Close)
	return e
}

// helloObjects: an opted-in Service on hello-00001 whose newest Revision is hello-00002.
func helloObjects() []runtime.Object {
	svc := knativefake.Service("default", "hello", nil, knativefake.Target("hello-00001", 100, ""))
	cfg := &servingv1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello", Generation: 2}}
	off := knativefake.Service("default", "other", nil, knativefake.Target("other-00001", 100, ""))
	off.Annotations["sluice.dev/rollout"] = "disabled"
	return []runtime.Object{svc, cfg, off,
		knativefake.Revision("default", "hello", 1, true), knativefake.Revision("default", "hello", 2, false),
		knativefake.Revision("default", "other", 2, false)}
}

type fixture struct {
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func loadFixture(t *testing.T, name string) fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "events", "testdata", "apiserversource", name))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// post sends a raw HTTP request and returns the status and body.
func (e *env) post(headers map[string]string, body []byte) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader(body))
	for k, v := range headers {
		if k != "Content-Length" && k != "Host" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func (e *env) replay(name string, mutate func(h map[string]string)) (int, string) {
	f := loadFixture(e.t, name)
	if mutate != nil {
		mutate(f.Headers)
	}
	return e.post(f.Headers, f.Body)
}

// send delivers an event through the CloudEvents SDK's HTTP client.
func (e *env) send(ev cloudevents.Event, structured bool, token string) int {
	e.t.Helper()
	opts := []cehttp.Option{cehttp.WithTarget(e.srv.URL)}
	if token != "" {
		opts = append(opts, cehttp.WithHeader("Authorization", "Bearer "+token))
	}
	p, err := cehttp.New(opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	if structured {
		ctx = cloudevents.WithEncodingStructured(ctx)
	}
	res := c.Send(ctx, ev)
	var httpRes *cehttp.Result
	if !cloudevents.ResultAs(res, &httpRes) {
		e.t.Fatalf("send: %v", res)
	}
	return httpRes.StatusCode
}

func commandEvent(typ, data string) cloudevents.Event {
	ev := cloudevents.NewEvent()
	ev.SetID("cmd-" + typ + data)
	ev.SetSource("/pipelines/deploy")
	ev.SetType(typ)
	_ = ev.SetData(cloudevents.ApplicationJSON, []byte(data))
	return ev
}

func TestRevisionAddStartsOneRollout(t *testing.T) {
	for _, structured := range []bool{false, true} {
		e := newEnv(t, helloObjects()...)
		f := loadFixture(t, "resource/02-revision-add.json")
		ev := fixtureEvent(t, f)
		if code := e.send(ev, structured, ""); code != http.StatusAccepted {
			t.Fatalf("structured=%v: first delivery: %d", structured, code)
		}
		// The same delivery again (same source and id): acknowledged, not acted on.
		if code := e.send(ev, structured, ""); code != http.StatusOK {
			t.Fatalf("structured=%v: duplicate delivery: %d", structured, code)
		}
		want := []string{"start rollout/default/service/hello"}
		if got := e.temporal.Calls(); strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("structured=%v: Temporal calls %v, want %v", structured, got, want)
		}
		if s := e.temporal.started[0]; s.StaticSummary != "hello: hello-00001 → hello-00002" || !strings.Contains(s.StaticDetails, "Policy: ") {
			t.Fatalf("UI summary %q, details %q", s.StaticSummary, s.StaticDetails)
		}
		if n := testutil.ToFloat64(e.rcv.Metrics.events.WithLabelValues("dev.knative.apiserver.resource.add", "duplicate")); n != 1 {
			t.Fatalf("duplicate metric = %v", n)
		}
	}
}

func fixtureEvent(t *testing.T, f fixture) cloudevents.Event {
	req, _ := http.NewRequest(http.MethodPost, "http://x/", bytes.NewReader(f.Body))
	for k, v := range f.Headers {
		req.Header.Set(k, v)
	}
	ev, err := cehttp.NewEventFromHTTPRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	return *ev
}

// Every Revision event that may matter to a rollout is one Temporal call, a
// signal-with-start of the candidate signal: the running rollout, if any,
// decides what the Revision is to it.
func TestRevisionEventIsOfferedInOneCall(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	code, msg := e.replay("resource/04-revision-update-ready-true.json", nil)
	if code != http.StatusAccepted || !strings.Contains(msg, "offered hello-00002 (ready) to the rollout of default/service/hello") {
		t.Fatalf("%d %s", code, msg)
	}
	if got := strings.Join(e.temporal.Calls(), "; "); got != "start rollout/default/service/hello" {
		t.Fatalf("calls %v", got)
	}
	offer, ok := e.temporal.signals[0].(api.CandidateSignal)
	if !ok || offer.Revision != "hello-00002" || offer.Generation != 2 || offer.State != knative.RevisionReady || offer.By == "" {
		t.Fatalf("signal %#v", e.temporal.signals[0])
	}
}

// A deleted Revision is told to a running rollout only: it starts nothing,
// and with no rollout running it is answered and dropped.
func TestDeletedRevisionStartsNothing(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.signalFn = func(string, string) error { return serviceerror.NewNotFound("workflow not found") }
	code, msg := e.replay("resource/08-revision-delete.json", nil)
	if code != http.StatusOK || !strings.Contains(msg, "no rollout is running for default/service/hello") {
		t.Fatalf("%d %s", code, msg)
	}
	if got := strings.Join(e.temporal.Calls(), "; "); got != "signal candidate rollout/default/service/hello" {
		t.Fatalf("calls %v", got)
	}
	offer, ok := e.temporal.signals[0].(api.CandidateSignal)
	if !ok || offer.State != knative.RevisionDeleted {
		t.Fatalf("signal %#v", e.temporal.signals[0])
	}
}

func TestNoSecondRolloutOfAHandledRevision(t *testing.T) {
	// A later update of a candidate its rollout rolled back (Knative
	// relabels it once it has no traffic): the Service says how it ended.
	objs := helloObjects()
	objs[0].(*servingv1.Service).Annotations[config.AnnotationEnded] = config.Ended("hello-00002", "RolledBack")
	e := newEnv(t, objs...)
	code, msg := e.replay("resource/04-revision-update-ready-true.json", func(h map[string]string) { h["Ce-Id"] = "relist" })
	if code != http.StatusOK || !strings.Contains(msg, "the rollout of hello-00002 on default/service/hello ended RolledBack (annotation sluice.dev/ended on Service default/hello)") {
		t.Fatalf("%d %s", code, msg)
	}
	if calls := e.temporal.Calls(); len(calls) != 0 {
		t.Fatalf("Temporal calls for a rolled-back candidate: %v", calls)
	}
	// A Revision that serves traffic already (the candidate of a rollout
	// that succeeded, or of one under way).
	e = newEnv(t, helloObjects()...)
	svc, _ := e.k.ServingV1().Services("default").Get(context.Background(), "hello", metav1.GetOptions{})
	svc.Spec.Traffic = []servingv1.TrafficTarget{{RevisionName: "hello-00002", Percent: new(int64(100))}}
	_, _ = e.k.ServingV1().Services("default").Update(context.Background(), svc, metav1.UpdateOptions{})
	code, msg = e.replay("resource/04-revision-update-ready-true.json", func(h map[string]string) { h["Ce-Id"] = "serving" })
	if code != http.StatusOK || !strings.Contains(msg, "hello-00002 already serves traffic on default/service/hello") {
		t.Fatalf("%d %s", code, msg)
	}
	// An old Revision's event never starts one.
	cfg, _ := e.k.ServingV1().Configurations("default").Get(context.Background(), "hello", metav1.GetOptions{})
	cfg.Generation = 3
	_, _ = e.k.ServingV1().Configurations("default").Update(context.Background(), cfg, metav1.UpdateOptions{})
	code, msg = e.replay("resource/02-revision-add.json", func(h map[string]string) { h["Ce-Id"] = "other" })
	if code != http.StatusOK || !strings.Contains(msg, "not the newest Revision of default/service/hello (it runs template 2 of 3)") {
		t.Fatalf("%d %s", code, msg)
	}
	if calls := e.temporal.Calls(); len(calls) != 0 {
		t.Fatalf("Temporal calls for events that need none: %v", calls)
	}
}

func TestTemporalUnavailableIsRetried(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.startErr = serviceerror.NewUnavailable("connection refused")
	code, msg := e.replay("resource/02-revision-add.json", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "Temporal unavailable") {
		t.Fatalf("%d %s", code, msg)
	}
	// Not remembered as handled: the broker's retry is acted on.
	e.temporal.startErr = serviceerror.NewResourceExhausted(0, "rps limit")
	code, _ = e.replay("resource/02-revision-add.json", nil)
	if code != http.StatusTooManyRequests {
		t.Fatalf("throttled: %d", code)
	}
}

func TestCommands(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.update = func(name string) (string, error) {
		if name == "resume" {
			return "", temporal.NewApplicationError("resume rejected: the rollout is not paused (phase Holding)", "")
		}
		if name == "pause" {
			return "", serviceerror.NewNotFound("workflow not found")
		}
		return "promoted hello-00002 past step 1 of 3", nil
	}
	ev := commandEvent("dev.sluice.rollout.promote", `{"target":"hello","namespace":"default","requester":"deploy-bot"}`)
	if code := e.send(ev, false, goodToken); code != http.StatusOK {
		t.Fatalf("promote: %d", code)
	}
	code, msg := e.postEvent(commandEvent("dev.sluice.rollout.resume", `{"target":"hello","namespace":"default"}`), goodToken)
	if code != http.StatusConflict || msg != "resume rejected: the rollout is not paused (phase Holding)" {
		t.Fatalf("rejected resume: %d %s", code, msg)
	}
	code, msg = e.postEvent(commandEvent("dev.sluice.rollout.pause", `{"target":"hello","namespace":"default"}`), e.issuer.token(t, "sluice-receiver", time.Hour))
	if code != http.StatusNotFound || !strings.Contains(msg, "no rollout found") {
		t.Fatalf("pause without rollout: %d %s", code, msg)
	}
	code, _ = e.postEvent(commandEvent("dev.sluice.rollout.request", `{"target":"hello","namespace":"default","revision":"hello-00002"}`), goodToken)
	if code != http.StatusAccepted {
		t.Fatalf("request: %d", code)
	}
}

// A command is authenticated before its payload is read: without a token,
// one that lacks its target gets 401, not a 400 saying what it lacks.
func TestCommandAuthenticatedBeforeItsPayload(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	for _, data := range []string{`{}`, `{"target":"hello","namespace":"default"}`, `not json`} {
		code, msg := e.postEvent(commandEvent("dev.sluice.rollout.promote", data), "")
		if code != http.StatusUnauthorized || strings.Contains(msg, "target") {
			t.Errorf("anonymous promote %s: %d %s, want 401 saying nothing of the payload", data, code, msg)
		}
	}
	if code, msg := e.postEvent(commandEvent("dev.sluice.rollout.promote", `{}`), goodToken); code != http.StatusBadRequest || !strings.Contains(msg, "target") {
		t.Errorf("authenticated promote without a target: %d %s, want 400 naming data.target", code, msg)
	}
}

// postEvent sends an event in binary mode over plain HTTP, to read the answer's body.
func (e *env) postEvent(ev cloudevents.Event, token string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, nil)
	if err := cehttp.WriteRequest(context.Background(), binaryMessage(ev), req); err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// issuer is a minimal OpenID Connect issuer: discovery, keys, and tokens.
type issuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newIssuer(t *testing.T) *issuer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := &issuer{key: key}
	mux := http.NewServeMux()
	iss.srv = httptest.NewServer(mux)
	t.Cleanup(iss.srv.Close)
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": iss.srv.URL, "jwks_uri": iss.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
			"authorization_endpoint": iss.srv.URL + "/auth", "token_endpoint": iss.srv.URL + "/token",
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	return iss
}

func (i *issuer) token(t *testing.T, audience string, ttl time.Duration) string {
	return signToken(t, i.key, i.srv.URL, audience, ttl)
}

func signToken(t *testing.T, key *rsa.PrivateKey, iss, audience string, ttl time.Duration) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{
		Issuer: iss, Subject: "system:serviceaccount:ci:deployer", Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), Expiry: jwt.NewNumericDate(now.Add(ttl)),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Route and Service status changes are not forwarded: the rollout watches
// the object it wrote while it verifies. A deleted target is.
func TestTrafficIgnoredDeleteHinted(t *testing.T) {
	owned := &servingv1.Route{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello-route",
		Labels: map[string]string{"serving.knative.dev/service": "hello"}}}
	e := newEnv(t, append(helloObjects(), owned)...)
	e.temporal.signalFn = func(string, string) error { return nil }
	code, msg := e.replay("resource/06-route-update-status.json", nil)
	if code != http.StatusOK || !strings.Contains(msg, "a rollout reads and watches its Route itself") {
		t.Fatalf("route update: %d %s", code, msg)
	}
	del := commandEvent("dev.knative.apiserver.resource.delete", `{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello","namespace":"default"}}`)
	code, msg = e.postEvent(del, "")
	if code != http.StatusAccepted || !strings.Contains(msg, "target deleted") {
		t.Fatalf("service delete: %d %s", code, msg)
	}
	want := "signal target-deleted rollout/default/service/hello"
	if got := strings.Join(e.temporal.Calls(), "; "); got != want {
		t.Fatalf("calls %s, want %s", got, want)
	}
}

// A Revision's status is written several times on its way to Ready; the
// receiver offers each state once: the add starts the rollout, the Unknown
// update says nothing new, Ready is signalled (the running rollout takes it
// as its candidate's state), a repeated Ready is not even looked up.
func TestRevisionStatesToldOnce(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	steps := []struct {
		fixture string
		code    int
		calls   string
	}{
		{"resource/02-revision-add.json", http.StatusAccepted, "start"},
		{"resource/03-revision-update-ready-unknown.json", http.StatusOK, ""},
		{"resource/04-revision-update-ready-true.json", http.StatusAccepted, "signal"},
		{"resource/04-revision-update-ready-true.json", http.StatusOK, ""},
	}
	for i, st := range steps {
		before := len(e.temporal.Calls())
		code, msg := e.replay(st.fixture, func(h map[string]string) { h["Ce-Id"] = fmt.Sprint("delivery-", i) })
		e.rcv.background().wait()
		var calls []string
		for _, c := range e.temporal.Calls()[before:] {
			calls = append(calls, strings.Fields(c)[0])
		}
		if code != st.code || strings.Join(calls, "; ") != st.calls {
			t.Fatalf("%s: %d %s, calls %v; want %d, calls %q", st.fixture, code, msg, calls, st.code, st.calls)
		}
	}
}

// Once a candidate is offered, its later states are answered before
// Temporal has them — the adapter's next event does not wait on the call —
// and offered in the background; one that cannot be offered is left to the
// rollout's own watch and not remembered, so a redelivery tries again.
func TestLaterStateAnsweredBeforeTemporal(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.signalFn = nil // its rollout runs
	if code, msg := e.replay("resource/02-revision-add.json", nil); code != http.StatusAccepted {
		t.Fatalf("the candidate's first event: %d %s", code, msg)
	}
	gate := make(chan struct{})
	e.temporal.mu.Lock()
	e.temporal.gate = gate
	e.temporal.mu.Unlock()
	code, msg := e.replay("resource/04-revision-update-ready-true.json", nil)
	if code != http.StatusAccepted || !strings.Contains(msg, "offering hello-00002 (ready) to the rollout of default/service/hello") {
		t.Fatalf("its Ready state, Temporal held: %d %s", code, msg)
	}
	if n := len(e.temporal.Calls()); n != 1 {
		t.Fatalf("%d Temporal calls before the held one went through, want 1", n)
	}
	close(gate)
	e.rcv.background().wait()
	e.temporal.mu.Lock()
	offer, _ := e.temporal.signals[len(e.temporal.signals)-1].(api.CandidateSignal)
	e.temporal.mu.Unlock()
	if n := len(e.temporal.Calls()); n != 2 || offer.State != knative.RevisionReady {
		t.Fatalf("after Temporal answered: %d calls, last offer %+v", n, offer)
	}
	if n := testutil.ToFloat64(e.rcv.Metrics.laters.WithLabelValues("offered")); n != 1 {
		t.Fatalf("background offers = %v", n)
	}

	e = newEnv(t, helloObjects()...)
	if code, msg := e.replay("resource/02-revision-add.json", nil); code != http.StatusAccepted {
		t.Fatalf("the candidate's first event: %d %s", code, msg)
	}
	e.temporal.mu.Lock()
	e.temporal.signalFn = func(string, string) error { return serviceerror.NewUnavailable("connection refused") }
	e.temporal.mu.Unlock()
	if code, msg := e.replay("resource/04-revision-update-ready-true.json", nil); code != http.StatusAccepted {
		t.Fatalf("its Ready state, Temporal away: %d %s", code, msg)
	}
	e.rcv.background().wait()
	if n := testutil.ToFloat64(e.rcv.Metrics.laters.WithLabelValues("failed")); n != 1 || len(e.temporal.Calls()) != 4 {
		t.Fatalf("failed background offers = %v after calls %v, want 1 after three tries", n, e.temporal.Calls())
	}
	e.temporal.mu.Lock()
	e.temporal.signalFn = nil
	e.temporal.mu.Unlock()
	code, msg = e.replay("resource/04-revision-update-ready-true.json", func(h map[string]string) { h["Ce-Id"] = "redelivered" })
	e.rcv.background().wait()
	if code != http.StatusAccepted || len(e.temporal.Calls()) != 5 {
		t.Fatalf("the redelivery: %d %s, calls %v", code, msg, e.temporal.Calls())
	}
}

// A later state of a candidate whose rollout has closed — it failed and
// rolled back, say, before a delayed event of it came, while the caches
// did not hold its ended mark yet — does not start the candidate's rollout
// again: the offer is a signal, and a closed rollout takes none.
func TestLaterStateOfAnEndedRolloutStartsNothing(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	if code, msg := e.replay("resource/02-revision-add.json", nil); code != http.StatusAccepted {
		t.Fatalf("the candidate's first event: %d %s", code, msg)
	}
	e.temporal.mu.Lock()
	e.temporal.signalFn = func(string, string) error {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	e.temporal.mu.Unlock()
	if code, msg := e.replay("resource/04-revision-update-ready-true.json", nil); code != http.StatusAccepted {
		t.Fatalf("its Ready state after its rollout closed: %d %s", code, msg)
	}
	e.rcv.background().wait()
	want := "start rollout/default/service/hello; signal candidate rollout/default/service/hello"
	if got := strings.Join(e.temporal.Calls(), "; "); got != want {
		t.Fatalf("Temporal calls %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(e.rcv.Metrics.laters.WithLabelValues("ended")); n != 1 {
		t.Fatalf("background offers to an ended rollout = %v, want 1", n)
	}
	// A redelivery is a duplicate: the state was handled.
	if code, msg := e.replay("resource/04-revision-update-ready-true.json", func(h map[string]string) { h["Ce-Id"] = "redelivered" }); code != http.StatusOK {
		t.Fatalf("the redelivery: %d %s", code, msg)
	}
}

func binaryMessage(ev cloudevents.Event) binding.Message { return binding.ToMessage(&ev) }

// A Service whose sluice annotations would do nothing (here its opt-in is
// misspelt) is warned of in the log once, not at every event about its
// Revisions; starting nothing, as before.
func TestNearMissWarnedOncePerObject(t *testing.T) {
	objs := helloObjects()
	svc := objs[0].(*servingv1.Service)
	delete(svc.Annotations, "sluice.dev/rollout")
	svc.Annotations["sluice.dev/rolout"] = "enabled"
	e := newEnv(t, objs...)
	var logs bytes.Buffer
	e.rcv.Log = slog.New(slog.NewTextHandler(&logs, nil))
	for _, name := range []string{"resource/02-revision-add.json", "resource/04-revision-update-ready-true.json", "resource/02-revision-add.json"} {
		f := loadFixture(t, name)
		ev := fixtureEvent(t, f)
		ev.SetID(ev.ID() + name + time.Now().String()) // not a duplicate delivery
		if code := e.send(ev, false, ""); code != http.StatusOK {
			t.Fatalf("%s: %d", name, code)
		}
	}
	if n := strings.Count(logs.String(), "sluice annotations that do nothing"); n != 1 ||
		!strings.Contains(logs.String(), "did you mean sluice.dev/rollout?") {
		t.Fatalf("%d warnings in the log:\n%s", n, logs.String())
	}
	if calls := e.temporal.Calls(); len(calls) != 0 {
		t.Fatalf("Temporal calls %v", calls)
	}
}
