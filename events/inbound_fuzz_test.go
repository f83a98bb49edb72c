package events

import (
	"errors"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

// FuzzMap feeds arbitrary types, content types and data to the mapping.
// Whatever arrives, Map must not panic, must say why it rejects an event, and
// must never ask for an action without the namespace and name it needs. The
// seed corpus in testdata/fuzz/FuzzMap holds the recorded ApiServerSource
// events and command events.
func FuzzMap(f *testing.F) {
	f.Add(TypeResourceAdd, "application/json", []byte(`{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"a-00001","namespace":"d","labels":{"serving.knative.dev/configuration":"a"}}}`))
	f.Add(TypeRefUpdate, "application/json", []byte(`{"apiVersion":"serving.knative.dev/v1","kind":"Route","namespace":"d","name":"r"}`))
	f.Add(TypeAbort, "application/json", []byte(`{"target":"hello","namespace":"d","reason":"x"}`))
	f.Fuzz(func(t *testing.T, typ, contentType string, data []byte) {
		e := cloudevents.NewEvent()
		e.SetID("fuzz")
		e.SetSource("/fuzz")
		e.SetType(typ)
		if contentType == "" {
			contentType = "application/json"
		}
		_ = e.SetData(contentType, data)
		a, err := Map(e)
		if err != nil {
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Reason == "" {
				t.Fatalf("Map error %v is not an InvalidError with a reason", err)
			}
			return
		}
		switch a.Kind {
		case KindIgnore:
			if a.Reason == "" {
				t.Fatalf("ignored without a reason: %+v", a)
			}
		case KindRevision, KindDeleted:
			if a.Namespace == "" || a.Name == "" || a.ObjectKind == "" {
				t.Fatalf("action without its object: %+v", a)
			}
			if a.Kind == KindRevision && !a.NeedsRead && !a.Deleted && a.Configuration == "" {
				t.Fatalf("Resource-mode Revision without its Configuration: %+v", a)
			}
		case KindCommand:
			if a.Command == nil || a.Command.Target == "" || a.Namespace == "" || a.Command.Name == "" {
				t.Fatalf("command without target or namespace: %+v", a)
			}
		default:
			t.Fatalf("unknown action kind %q", a.Kind)
		}
	})
}
