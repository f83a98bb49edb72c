// Package events holds sluice's CloudEvents: mapping inbound events (Knative
// ApiServerSource notifications and sluice's own command events) to actions,
// and building the progress events sluice emits.
package events

import (
	"encoding/json"
	"fmt"
	"strings"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// Inbound event types.
const (
	// Knative Eventing's ApiServerSource, Resource mode: data is the object.
	TypeResourceAdd    = "dev.knative.apiserver.resource.add"
	TypeResourceUpdate = "dev.knative.apiserver.resource.update"
	TypeResourceDelete = "dev.knative.apiserver.resource.delete"
	// Reference mode: data is an object reference; sluice reads the object.
	TypeRefAdd    = "dev.knative.apiserver.ref.add"
	TypeRefUpdate = "dev.knative.apiserver.ref.update"
	TypeRefDelete = "dev.knative.apiserver.ref.delete"

	// sluice's command events, for pipelines and chat bots.
	TypeRequest = "dev.sluice.rollout.request"
	TypePromote = "dev.sluice.rollout.promote"
	TypePause   = "dev.sluice.rollout.pause"
	TypeResume  = "dev.sluice.rollout.resume"
	TypeAbort   = "dev.sluice.rollout.abort"
	TypeUndo    = "dev.sluice.rollout.undo"

	// Commands to a wave plan's wave (docs/waves.md).
	TypeWavePromote = "dev.sluice.wave.promote"
	TypeWavePause   = "dev.sluice.wave.pause"
	TypeWaveResume  = "dev.sluice.wave.resume"
	TypeWaveAbort   = "dev.sluice.wave.abort"
)

const servingGroup = "serving.knative.dev"

// Kind is what the receiver does with an event.
type Kind string

const (
	// KindRevision: a Revision was added or changed. Start a rollout if it is
	// a new candidate of an opted-in target; otherwise hint the running one.
	KindRevision Kind = "revision"
	// KindDeleted: a rollout target (Service or Configuration) was deleted.
	KindDeleted Kind = "deleted"
	// KindCommand: a command event for a rollout.
	KindCommand Kind = "command"
	// KindIgnore: a valid event that is not for sluice.
	KindIgnore Kind = "ignore"
)

// Action is what an event asks of sluice, before any lookup: the mapping is
// pure, so it is fuzzed and benchmarked on its own.
type Action struct {
	Kind      Kind   `json:"kind"`
	Namespace string `json:"namespace"`
	// ObjectKind and Name name the object the event is about.
	ObjectKind string `json:"objectKind,omitempty"`
	Name       string `json:"name,omitempty"`
	// NeedsRead is set for Reference mode: the event carries no object.
	NeedsRead bool `json:"needsRead,omitempty"`
	Deleted   bool `json:"deleted,omitempty"`
	// From a Revision in Resource mode: its owners and readiness.
	Configuration string `json:"configuration,omitempty"`
	Service       string `json:"service,omitempty"`
	// Ready is the Revision's readiness, carried as is to its rollout.
	Ready knative.Readiness `json:"ready,omitempty"`
	// ReadyReason and ReadyMessage are the Ready condition's, which say why
	// a Revision failed.
	ReadyReason  string `json:"readyReason,omitempty"`
	ReadyMessage string `json:"readyMessage,omitempty"`
	// Generation is the Revision's configurationGeneration label: which
	// template of its Configuration it runs.
	Generation int64 `json:"generation,omitempty"`
	// A command event's fields.
	Command *CommandData `json:"command,omitempty"`
	// Why the event is ignored.
	Reason string `json:"reason,omitempty"`
}

// CommandData is the JSON payload of every dev.sluice.rollout.* command event.
type CommandData struct {
	// Target is NAME or service/NAME (a Knative Service) or configuration/NAME.
	Target    string `json:"target"`
	Namespace string `json:"namespace"`
	// Revision is the candidate, for dev.sluice.rollout.request, and the
	// Revision to go back to, for dev.sluice.rollout.undo (default: the
	// one that had 100% before).
	Revision string `json:"revision,omitempty"`
	// Full, on a promote, skips the remaining steps.
	Full      bool   `json:"full,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Requester string `json:"requester,omitempty"`
	// Release names a wave's release, for dev.sluice.wave.* (default: the
	// target's newest wave).
	Release string `json:"release,omitempty"`
	// Name is the sluice command: request, promote, promote-full, pause, resume, abort, undo.
	Name string `json:"-"`
	// Wave says the command is for the target's wave, not its rollout.
	Wave bool `json:"-"`
}

// InvalidError is an event sluice cannot act on as sent: the sender must fix
// it, so it is answered with 400 and not retried.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// IsCommand reports whether an event type is one of sluice's commands
// (dev.sluice.rollout.*), which only an authenticated sender may send.
func IsCommand(eventType string) bool {
	switch eventType {
	case TypeRequest, TypePromote, TypePause, TypeResume, TypeAbort, TypeUndo,
		TypeWavePromote, TypeWavePause, TypeWaveResume, TypeWaveAbort:
		return true
	}
	return false
}

// Map turns a CloudEvent into an Action. It returns an *InvalidError for an
// event that claims a type sluice handles but is malformed.
func Map(e cloudevents.Event) (Action, error) {
	if err := e.Validate(); err != nil {
		return Action{}, invalid("invalid CloudEvent: %v", err)
	}
	switch e.Type() {
	case TypeResourceAdd, TypeResourceUpdate, TypeResourceDelete:
		return mapResource(e)
	case TypeRefAdd, TypeRefUpdate, TypeRefDelete:
		return mapReference(e)
	}
	if IsCommand(e.Type()) {
		return mapCommand(e)
	}
	return Action{Kind: KindIgnore, Reason: "event type " + e.Type() + " is not for sluice"}, nil
}

// resourceData is the part of a Knative object sluice reads from an event.
type resourceData struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// SetRevision takes a Revision's owners and generation from its labels, and
// its readiness as Knative's own lifecycle helpers judge it (Revision.IsReady
// and IsFailed, which also ask that the status is current): the one
// definition of Ready the rollout uses too. A deleted Revision is Deleted.
func (a *Action) SetRevision(r *servingv1.Revision) {
	l := knative.ReadRevisionLabels(r.Labels)
	a.Configuration, a.Service, a.Generation = l.Configuration, l.Service, l.Generation
	st := knative.StateOf(r)
	a.Ready = st.Readiness()
	if a.Deleted {
		a.Ready = knative.RevisionDeleted
	}
	a.ReadyReason, a.ReadyMessage = st.Reason, st.Message
}

func mapResource(e cloudevents.Event) (Action, error) {
	var obj resourceData
	if err := decodeJSON(e, &obj); err != nil {
		return Action{}, err
	}
	if obj.Kind == "" || obj.Metadata.Name == "" || obj.Metadata.Namespace == "" {
		return Action{}, invalid("%s: data must be a Kubernetes object with kind, metadata.name and metadata.namespace", e.Type())
	}
	a := Action{Namespace: obj.Metadata.Namespace, ObjectKind: obj.Kind, Name: obj.Metadata.Name, Deleted: e.Type() == TypeResourceDelete}
	if !isServing(obj.APIVersion) {
		return ignore(a, obj.APIVersion+" "+obj.Kind+" is not a Knative Serving object"), nil
	}
	if obj.Kind == "Revision" {
		var rev servingv1.Revision
		if err := decodeJSON(e, &rev); err != nil {
			return Action{}, err
		}
		a.SetRevision(&rev)
		if a.Configuration == "" {
			return ignore(a, "Revision "+a.Name+" has no "+servingGroup+"/configuration label"), nil
		}
	}
	return classify(a, e.Type() == TypeResourceAdd), nil
}

// referenceData is the data of a Reference-mode event.
type referenceData struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

func mapReference(e cloudevents.Event) (Action, error) {
	var ref referenceData
	if err := decodeJSON(e, &ref); err != nil {
		return Action{}, err
	}
	if ref.Kind == "" || ref.Name == "" || ref.Namespace == "" {
		return Action{}, invalid("%s: data must be an object reference with kind, namespace and name", e.Type())
	}
	a := Action{Namespace: ref.Namespace, ObjectKind: ref.Kind, Name: ref.Name, Deleted: e.Type() == TypeRefDelete}
	if !isServing(ref.APIVersion) {
		return ignore(a, ref.APIVersion+" "+ref.Kind+" is not a Knative Serving object"), nil
	}
	a.NeedsRead = a.ObjectKind == "Revision" && !a.Deleted
	return classify(a, e.Type() == TypeRefAdd), nil
}

// classify decides what an event about a Knative object means.
func classify(a Action, added bool) Action {
	switch a.ObjectKind {
	case "Revision":
		a.Kind = KindRevision
	case "Service":
		switch {
		case a.Deleted:
			a.Kind = KindDeleted
		case added:
			return ignore(a, "a new Service has no rollout yet; its first Revision's event starts one")
		default:
			return ignore(a, "a Service's changes show up as Revision events, and a rollout watches its own traffic")
		}
	case "Configuration":
		if !a.Deleted {
			return ignore(a, "Configuration changes show up as Revision events")
		}
		a.Kind = KindDeleted
	case "Route":
		return ignore(a, "a rollout reads and watches its Route itself")
	default:
		return ignore(a, a.ObjectKind+" events are not for sluice")
	}
	return a
}

func mapCommand(e cloudevents.Event) (Action, error) {
	var cmd CommandData
	if err := decodeJSON(e, &cmd); err != nil {
		return Action{}, err
	}
	cmd.Name = strings.TrimPrefix(e.Type(), "dev.sluice.rollout.")
	if name, ok := strings.CutPrefix(e.Type(), "dev.sluice.wave."); ok {
		cmd.Name, cmd.Wave = name, true
	}
	if cmd.Name == api.CommandPromote && cmd.Full && !cmd.Wave {
		cmd.Name = api.CommandPromoteFull
	}
	switch {
	case cmd.Target == "":
		return Action{}, invalid("%s: data.target is required (NAME, service/NAME or configuration/NAME)", e.Type())
	case cmd.Namespace == "":
		return Action{}, invalid("%s: data.namespace is required", e.Type())
	case cmd.Name == "request" && cmd.Revision == "":
		return Action{}, invalid("%s: data.revision is required: the Revision to roll out", e.Type())
	case (cmd.Name == api.CommandAbort || cmd.Name == api.CommandUndo) && cmd.Reason == "":
		return Action{}, invalid("%s: data.reason is required: it is kept in the rollout's history", e.Type())
	case cmd.Wave && cmd.Full:
		return Action{}, invalid("%s: data.full is for a rollout's promote; a wave's promote ends its soak", e.Type())
	}
	return Action{Kind: KindCommand, Namespace: cmd.Namespace, Command: &cmd}, nil
}

func decodeJSON(e cloudevents.Event, into any) error {
	if len(e.Data()) == 0 {
		return invalid("%s: data is required", e.Type())
	}
	if ct := e.DataContentType(); ct != "" && !strings.Contains(ct, "json") {
		return invalid("%s: data must be JSON, got content type %q", e.Type(), ct)
	}
	if err := json.Unmarshal(e.Data(), into); err != nil {
		return invalid("%s: data is not valid JSON for this type: %v", e.Type(), err)
	}
	return nil
}

func isServing(apiVersion string) bool {
	return strings.HasPrefix(apiVersion, servingGroup+"/")
}

func ignore(a Action, why string) Action {
	a.Kind, a.Reason = KindIgnore, why
	return a
}
