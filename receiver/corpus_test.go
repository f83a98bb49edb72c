package receiver

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBadInputCorpus sends malformed, unauthorised and out-of-scope
// deliveries. Each gets a defined status code and a message a sender can
// act on, and none reaches Temporal.
func TestBadInputCorpus(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	rev := loadFixture(t, "resource/02-revision-add.json")
	ref := loadFixture(t, "reference/01-revision-add.json")
	headers := func(f fixture, mutate func(map[string]string)) map[string]string {
		h := map[string]string{}
		for k, v := range f.Headers {
			h[k] = v
		}
		mutate(h)
		return h
	}
	id := 0
	binary := func(typ, data string, extra map[string]string) (map[string]string, []byte) {
		id++
		h := map[string]string{"Ce-Specversion": "1.0", "Ce-Id": fmt.Sprintf("bad-%d", id), "Ce-Source": "/test", "Ce-Type": typ, "Content-Type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		return h, []byte(data)
	}
	cmd := func(typ, data, token string) (map[string]string, []byte) {
		extra := map[string]string{}
		if token != "" {
			extra["Authorization"] = "Bearer " + token
		}
		return binary(typ, data, extra)
	}
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	huge := `{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"x","namespace":"default","annotations":{"a":"` + strings.Repeat("x", DefaultMaxBody) + `"}}}`

	type delivery struct {
		headers map[string]string
		body    []byte
	}
	d := func(h map[string]string, b []byte) delivery { return delivery{h, b} }
	cases := []struct {
		name    string
		in      delivery
		method  string
		code    int
		message string
	}{
		{"GET instead of POST", d(rev.Headers, rev.Body), http.MethodGet, 405, "POST CloudEvents here"},
		{"not a CloudEvent", d(map[string]string{"Content-Type": "application/json"}, []byte(`{"hello":"world"}`)), "", 415, "not a CloudEvent"},
		{"missing id", d(headers(rev, func(h map[string]string) { delete(h, "Ce-Id") }), rev.Body), "", 400, "id"},
		{"missing source", d(headers(rev, func(h map[string]string) { delete(h, "Ce-Source") }), rev.Body), "", 400, "source"},
		{"missing type", d(headers(rev, func(h map[string]string) { delete(h, "Ce-Type") }), rev.Body), "", 400, "type"},
		{"wrong specversion", d(headers(rev, func(h map[string]string) { h["Ce-Specversion"] = "0.1" }), rev.Body), "", 415, "not a CloudEvent"},
		{"structured, broken envelope", d(map[string]string{"Content-Type": "application/cloudevents+json"}, []byte(`{"specversion":"1.0","id":`)), "", 400, "invalid CloudEvent"},
		{"invalid JSON data", d(headers(rev, nil2), []byte(`{"kind":"Revision",`)), "", 400, "data is not valid JSON"},
		{"data is an array", d(headers(rev, nil2), []byte(`[1,2]`)), "", 400, "data is not valid JSON for this type"},
		{"object without name", d(binary("dev.knative.apiserver.resource.add", `{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"namespace":"default"}}`, nil)), "", 400, "metadata.name"},
		{"reference without name", d(headers(ref, nil2), []byte(`{"kind":"Revision","namespace":"default","apiVersion":"serving.knative.dev/v1"}`)), "", 400, "object reference with kind, namespace and name"},
		{"data not JSON", d(binary("dev.knative.apiserver.resource.update", `<Revision/>`, map[string]string{"Content-Type": "application/xml"})), "", 400, `data must be JSON, got content type "application/xml"`},
		{"huge body", d(binary("dev.knative.apiserver.resource.add", huge, nil)), "", 413, "larger than 1048576 bytes"},
		{"namespace not allowed", d(binary("dev.knative.apiserver.resource.add", `{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"x-00002","namespace":"kube-system","labels":{"serving.knative.dev/configuration":"x"}}}`, nil)), "", 403, `namespace "kube-system" is not served`},
		{"command without token", d(cmd("dev.sluice.rollout.promote", `{"target":"hello","namespace":"default"}`, "")), "", 401, "no bearer token"},
		{"command with an unknown static token", d(cmd("dev.sluice.rollout.promote", `{"target":"hello","namespace":"default"}`, "not-the-token-0123456789")), "", 401, "token rejected"},
		{"command with an expired JWT", d(cmd("dev.sluice.rollout.abort", `{"target":"hello","namespace":"default","reason":"x"}`, e.issuer.token(t, "sluice-receiver", -time.Minute))), "", 401, "expired"},
		{"command with a JWT for another audience", d(cmd("dev.sluice.rollout.pause", `{"target":"hello","namespace":"default"}`, e.issuer.token(t, "someone-else", time.Hour))), "", 401, "audience"},
		{"command with a JWT signed by another key", d(cmd("dev.sluice.rollout.pause", `{"target":"hello","namespace":"default"}`, signToken(t, otherKey, e.issuer.srv.URL, "sluice-receiver", time.Hour))), "", 401, "token rejected"},
		{"command without target", d(cmd("dev.sluice.rollout.promote", `{"namespace":"default"}`, goodToken)), "", 400, "data.target is required"},
		{"command with an unknown target kind", d(cmd("dev.sluice.rollout.promote", `{"target":"deployment/x","namespace":"default"}`, goodToken)), "", 400, "kind must be service or configuration"},
		{"abort without reason", d(cmd("dev.sluice.rollout.abort", `{"target":"hello","namespace":"default"}`, goodToken)), "", 400, "data.reason is required"},
		{"request without revision", d(cmd("dev.sluice.rollout.request", `{"target":"hello","namespace":"default"}`, goodToken)), "", 400, "data.revision is required"},
		{"command for a namespace not allowed", d(cmd("dev.sluice.rollout.pause", `{"target":"hello","namespace":"kube-system"}`, goodToken)), "", 403, "not served"},
		{"not a Knative object", d(binary("dev.knative.apiserver.resource.update", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x","namespace":"default"}}`, nil)), "", 200, "not a Knative Serving object"},
		{"an event type for someone else", d(binary("com.example.order.created", `{}`, nil)), "", 200, "is not for sluice"},
		{"Revision without configuration label", d(binary("dev.knative.apiserver.resource.add", `{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"x","namespace":"default"}}`, nil)), "", 200, "no serving.knative.dev/configuration label"},
		{"Revision of a Service that did not opt in", d(binary("dev.knative.apiserver.resource.add", `{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"other-00002","namespace":"default","labels":{"serving.knative.dev/configuration":"other","serving.knative.dev/service":"other"}}}`, nil)), "", 200, "default/service/other is not opted in"},
		{"Revision of a Service that does not exist", d(binary("dev.knative.apiserver.resource.add", `{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"gone-00002","namespace":"default","labels":{"serving.knative.dev/configuration":"gone","serving.knative.dev/service":"gone"}}}`, nil)), "", 200, "Service default/gone not found"},
	}
	if len(cases) < 20 {
		t.Fatalf("the corpus has %d cases, want at least 20", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var code int
			var msg string
			if tc.method != "" {
				req, _ := http.NewRequest(tc.method, e.srv.URL, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				code = resp.StatusCode
				msg = "POST CloudEvents here"
			} else {
				code, msg = e.post(tc.in.headers, tc.in.body)
			}
			if code != tc.code || !strings.Contains(msg, tc.message) {
				t.Fatalf("got %d %q, want %d containing %q", code, msg, tc.code, tc.message)
			}
			if calls := e.temporal.Calls(); len(calls) != 0 {
				t.Fatalf("reached Temporal: %v", calls)
			}
		})
	}
}

func nil2(map[string]string) {}

func TestSourceEventsNeedTokenWhenConfigured(t *testing.T) {
	e := newEnv(t, helloObjects()...)
	e.rcv.AllowUnauthenticatedSource = false
	code, msg := e.replay("resource/02-revision-add.json", nil)
	if code != http.StatusUnauthorized || !strings.Contains(msg, "no bearer token") || len(e.temporal.Calls()) != 0 {
		t.Fatalf("%d %s %v", code, msg, e.temporal.Calls())
	}
	code, _ = e.replay("resource/02-revision-add.json", func(h map[string]string) { h["Authorization"] = "Bearer " + goodToken })
	if code != http.StatusAccepted {
		t.Fatalf("with a token: %d", code)
	}
}
