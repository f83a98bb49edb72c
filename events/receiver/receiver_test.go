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
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/test/knativefake"
	"github.com/sluicehq/sluice/workflows"
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
		Serving:                    knativefake.New(objs...),
		Auth:                       AnyOf(tokens, oidcAuth),
		AllowUnauthenticatedSource: true,
		Namespaces:                 map[string]bool{"default": true, "shop": true},
		MaxBody:                    DefaultMaxBody,
		Log:                        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:                    NewMetrics(reg),
		Seen:                       NewSeen(1000, time.Minute),
	}
	e := &env{t: t, temporal: ft, rcv: rcv, reg: reg, issuer: iss}
	e.k = rcv.Serving.(*knativefake.Cluster)
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
	b, err := os.ReadFile(filepath.Join("..", "testdata", "apiserversource", name))
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
		want := []string{"describe rollout/default/service/hello", "start rollout/default/service/hello"}
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

func TestRevisionEventSignalsRunningRollout(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.signalFn = func(string, string) error { return nil }
	// A rollout of another Revision runs: it hears of hello-00002 (and
	// supersedes its candidate if hello-00002 is newer).
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return describeRunning(t, "hello-00001"), nil
	}
	code, msg := e.replay("resource/04-revision-update-ready-true.json", nil)
	if code != http.StatusAccepted || !strings.Contains(msg, "signalled the rollout of default/service/hello") {
		t.Fatalf("%d %s", code, msg)
	}
	if got := strings.Join(e.temporal.Calls(), "; "); got != "describe rollout/default/service/hello; signal candidate rollout/default/service/hello" {
		t.Fatalf("calls %v", got)
	}
	// The running rollout's own candidate: it is told that its Revision
	// is Ready, with what the event said and who sent it.
	e = newEnv(t, helloObjects()...)
	e.temporal.signalFn = func(string, string) error { return nil }
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return describeRunning(t, "hello-00002"), nil
	}
	code, msg = e.replay("resource/04-revision-update-ready-true.json", nil)
	if code != http.StatusAccepted || !strings.Contains(msg, "told the rollout of default/service/hello: hello-00002 is Ready") {
		t.Fatalf("%d %s", code, msg)
	}
	if got := strings.Join(e.temporal.Calls(), "; "); got != "describe rollout/default/service/hello; signal candidate-state rollout/default/service/hello" {
		t.Fatalf("calls %v", got)
	}
	told, ok := e.temporal.signals[0].(workflows.CandidateState)
	if !ok || told.Revision != "hello-00002" || told.State != workflows.StateReady || told.By == "" {
		t.Fatalf("signal %#v", e.temporal.signals[0])
	}
}

// A rollout that ended between the describe and the signal is not an
// error: the event is answered and dropped.
func TestCandidateStateAfterRolloutEnded(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return describeRunning(t, "hello-00002"), nil
	}
	code, msg := e.replay("resource/04-revision-update-ready-true.json", nil)
	if code != http.StatusOK || !strings.Contains(msg, "no rollout is running for default/service/hello") {
		t.Fatalf("%d %s", code, msg)
	}
}

func describeRunning(t *testing.T, candidate string) *workflowservice.DescribeWorkflowExecutionResponse {
	resp := describeWithCandidate(t, candidate)
	resp.WorkflowExecutionInfo.Status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	return resp
}

func TestNoSecondRolloutOfAHandledRevision(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return describeWithCandidate(t, "hello-00002"), nil
	}
	// An update of hello-00002 after its rollout ended (ApiServerSource re-lists on restart).
	code, msg := e.replay("resource/04-revision-update-ready-true.json", nil)
	if code != http.StatusOK || !strings.Contains(msg, "the last rollout of default/service/hello was for hello-00002 already") {
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
	for _, c := range e.temporal.Calls() {
		if strings.HasPrefix(c, "start") {
			t.Fatalf("started a rollout: %v", e.temporal.Calls())
		}
	}
}

func describeWithCandidate(t *testing.T, candidate string) *workflowservice.DescribeWorkflowExecutionResponse {
	sa := temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword("SluiceCandidate").ValueSet(candidate))
	resp := &workflowservice.DescribeWorkflowExecutionResponse{}
	payloads, err := encodeSearchAttributes(sa)
	if err != nil {
		t.Fatal(err)
	}
	resp.WorkflowExecutionInfo = payloads
	return resp
}

func TestTemporalUnavailableIsRetried(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return nil, serviceerror.NewUnavailable("connection refused")
	}
	code, msg := e.replay("resource/02-revision-add.json", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "Temporal unavailable") {
		t.Fatalf("%d %s", code, msg)
	}
	// Not remembered as handled: the broker's retry is acted on.
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return nil, serviceerror.NewResourceExhausted(0, "rps limit")
	}
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
// receiver acts on each state once: the add starts the rollout, the Unknown
// update says nothing new, Ready is told to the running rollout whose
// candidate it is, a repeated Ready is not even looked up.
func TestRevisionStatesToldOnce(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.temporal.signalFn = func(string, string) error { return nil }
	started := false
	e.temporal.describe = func(string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		if !started {
			return nil, serviceerror.NewNotFound("no rollout")
		}
		return describeRunning(t, "hello-00002"), nil
	}
	steps := []struct {
		fixture string
		code    int
		calls   string
	}{
		{"resource/02-revision-add.json", http.StatusAccepted, "describe; start"},
		{"resource/03-revision-update-ready-unknown.json", http.StatusOK, ""},
		{"resource/04-revision-update-ready-true.json", http.StatusAccepted, "describe; signal"},
		{"resource/04-revision-update-ready-true.json", http.StatusOK, ""},
	}
	for i, st := range steps {
		before := len(e.temporal.Calls())
		code, msg := e.replay(st.fixture, func(h map[string]string) { h["Ce-Id"] = fmt.Sprint("delivery-", i) })
		started = true
		var calls []string
		for _, c := range e.temporal.Calls()[before:] {
			calls = append(calls, strings.Fields(c)[0])
		}
		if code != st.code || strings.Join(calls, "; ") != st.calls {
			t.Fatalf("%s: %d %s, calls %v; want %d, calls %q", st.fixture, code, msg, calls, st.code, st.calls)
		}
	}
}
