package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/sluicehq/sluice/knative"
)

// fixture is one HTTP POST recorded from Knative's ApiServerSource adapter.
type fixture struct {
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func loadFixture(t testing.TB, name string) fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "apiserversource", name))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

func (f fixture) request(t testing.TB) *http.Request {
	req, err := http.NewRequest(http.MethodPost, "http://receiver/", bytes.NewReader(f.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range f.Headers {
		if k != "Content-Length" && k != "Host" {
			req.Header.Set(k, v)
		}
	}
	return req
}

func (f fixture) event(t testing.TB) cloudevents.Event {
	e, err := cehttp.NewEventFromHTTPRequest(f.request(t))
	if err != nil {
		t.Fatalf("parse recorded event: %v", err)
	}
	return *e
}

func TestMapRecordedEvents(t *testing.T) {
	tests := []struct {
		file string
		want Action
	}{
		{"resource/01-service-add.json", Action{Kind: KindIgnore, Namespace: "default", ObjectKind: "Service", Name: "hello"}},
		{"resource/02-revision-add.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00002", Configuration: "hello", Service: "hello", Generation: 2}},
		{"resource/03-revision-update-ready-unknown.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00002", Configuration: "hello", Service: "hello", Generation: 2, ReadyReason: "Deploying"}},
		{"resource/04-revision-update-ready-true.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00002", Configuration: "hello", Service: "hello", Generation: 2, Ready: knative.RevisionReady}},
		{"resource/05-route-add.json", Action{Kind: KindIgnore, Namespace: "default", ObjectKind: "Route", Name: "hello-route"}},
		{"resource/06-route-update-status.json", Action{Kind: KindIgnore, Namespace: "default", ObjectKind: "Route", Name: "hello-route"}},
		{"resource/07-revision-update-ready-false.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00002", Configuration: "hello", Service: "hello", Generation: 2, Ready: knative.RevisionFailed, ReadyReason: "ExitCode1", ReadyMessage: "Container failed with: panic"}},
		{"resource/08-revision-delete.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00002", Configuration: "hello", Service: "hello", Generation: 2, Ready: knative.RevisionDeleted, ReadyReason: "ExitCode1", ReadyMessage: "Container failed with: panic", Deleted: true}},
		{"reference/01-revision-add.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00003", NeedsRead: true}},
		{"reference/02-revision-update.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00003", NeedsRead: true}},
		{"reference/03-revision-delete.json", Action{Kind: KindRevision, Namespace: "default", ObjectKind: "Revision", Name: "hello-00003", Deleted: true}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Map(loadFixture(t, tt.file).event(t))
			if err != nil {
				t.Fatalf("Map: %v", err)
			}
			got.Reason = "" // the wording of ignore reasons is not under test here
			if g, w := mustJSON(got), mustJSON(tt.want); g != w {
				t.Fatalf("Map =\n%s\nwant\n%s", g, w)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func commandEvent(t testing.TB, typ, data string) cloudevents.Event {
	e := cloudevents.NewEvent()
	e.SetID("cmd-1")
	e.SetSource("/pipelines/deploy")
	e.SetType(typ)
	if data != "" {
		if err := e.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func TestMapCommands(t *testing.T) {
	got, err := Map(commandEvent(t, TypePromote, `{"target":"hello","namespace":"shop","full":true,"reason":"hotfix","requester":"ci"}`))
	if err != nil || got.Kind != KindCommand || got.Command.Name != "promote-full" || got.Namespace != "shop" || got.Command.Requester != "ci" {
		t.Fatalf("promote --full event: %+v, %v", got, err)
	}
	got, err = Map(commandEvent(t, TypeRequest, `{"target":"configuration/api","namespace":"shop","revision":"api-00004"}`))
	if err != nil || got.Command.Name != "request" || got.Command.Revision != "api-00004" {
		t.Fatalf("request event: %+v, %v", got, err)
	}
	got, err = Map(commandEvent(t, TypeUndo, `{"target":"hello","namespace":"shop","revision":"hello-00003","reason":"p99 up"}`))
	if err != nil || got.Kind != KindCommand || got.Command.Name != "undo" || got.Command.Revision != "hello-00003" || got.Command.Reason != "p99 up" {
		t.Fatalf("undo event: %+v, %v", got, err)
	}
	got, err = Map(commandEvent(t, TypeWavePromote, `{"target":"hello","namespace":"shop","release":"5d1f0c9a2e11","reason":"canary fine"}`))
	if err != nil || got.Kind != KindCommand || !got.Command.Wave || got.Command.Name != "promote" || got.Command.Release != "5d1f0c9a2e11" {
		t.Fatalf("wave promote event: %+v, %v", got, err)
	}
	for _, tc := range []struct{ typ, data, want string }{
		{TypeWaveAbort, `{"target":"hello","namespace":"shop"}`, "data.reason is required"},
		{TypeWavePromote, `{"target":"hello","namespace":"shop","full":true}`, "data.full is for a rollout's promote"},
		{TypePromote, `{"namespace":"shop"}`, "data.target is required"},
		{TypePromote, `{"target":"hello"}`, "data.namespace is required"},
		{TypeRequest, `{"target":"hello","namespace":"shop"}`, "data.revision is required"},
		{TypeAbort, `{"target":"hello","namespace":"shop"}`, "data.reason is required"},
		{TypeUndo, `{"target":"hello","namespace":"shop"}`, "data.reason is required"},
		{TypePause, `{"target":`, "data is not valid JSON"},
		{TypePause, ``, "data is required"},
	} {
		_, err := Map(commandEvent(t, tc.typ, tc.data))
		var inv *InvalidError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &inv) {
			t.Errorf("%s %s: error %v, want InvalidError containing %q", tc.typ, tc.data, err, tc.want)
		}
	}
}

func TestMapIgnoresForeignEvents(t *testing.T) {
	got, err := Map(commandEvent(t, "com.example.order.created", `{}`))
	if err != nil || got.Kind != KindIgnore {
		t.Fatalf("foreign type: %+v, %v", got, err)
	}
	e := commandEvent(t, TypeResourceUpdate, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x","namespace":"default"}}`)
	if got, err := Map(e); err != nil || got.Kind != KindIgnore || !strings.Contains(got.Reason, "not a Knative Serving object") {
		t.Fatalf("a Deployment: %+v, %v", got, err)
	}
}
