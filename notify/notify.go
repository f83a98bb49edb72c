// Package notify sends rollouts' progress to Slack, Microsoft Teams, a
// webhook or any other service of Argo's notifications-engine, configured
// the way Argo CD and Argo Rollouts users know: services, triggers and
// templates in a ConfigMap and a Secret (both named sluice-notifications, in
// the worker's namespace), subscriptions in annotations on the target
// (notifications.sluice.dev/subscribe.TRIGGER.SERVICE: recipients) or in the
// ConfigMap by label selector.
//
// Sending happens beside the rollout, never in its way: a progress event is
// queued, and a slow or failing chat service only delays or drops messages.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/argoproj/notifications-engine/pkg/api"
	"github.com/argoproj/notifications-engine/pkg/services"
	"github.com/argoproj/notifications-engine/pkg/subscriptions"
	"k8s.io/apimachinery/pkg/util/cache"

	"github.com/sluicehq/sluice/events"
	"github.com/sluicehq/sluice/knative"
)

// ConfigName names the ConfigMap and the Secret that configure
// notifications.
const ConfigName = "sluice-notifications"

// AnnotationPrefix is where subscriptions live on a target:
// notifications.sluice.dev/subscribe.on-rollout-rolled-back.slack: deploys.
const AnnotationPrefix = "notifications.sluice.dev"

func init() { subscriptions.SetAnnotationPrefix(AnnotationPrefix) }

// APIs gives the notifications API as the configuration now stands
// (notifications-engine's api.Factory does).
type APIs interface {
	GetAPI() (api.API, error)
}

// Targets reads a target's labels and annotations: its subscriptions.
type Targets interface {
	Metadata(ctx context.Context, t knative.TargetRef) (labels, annotations map[string]string, err error)
}

// Queue and retry bounds: the queue holds far more events than the worker
// sends in the time one message takes; a message is tried three times.
const (
	queueSize = 1000
	attempts  = 3
	sentTTL   = time.Hour
)

// Notifier turns progress events into notifications.
type Notifier struct {
	APIs    APIs
	Targets Targets
	// UI and Namespace make each message's link to its workflow in the
	// Temporal UI; no link without UI.
	UI, Namespace string
	Log           *slog.Logger
	Metrics       *Metrics
	// Backoff is the wait before the nth retry of a failed send.
	Backoff func(n int) time.Duration

	queue chan events.Progress
	// sent holds what went out (event, trigger, destination), so a
	// progress activity that is retried sends nothing twice.
	sent *cache.LRUExpireCache
}

// New returns a Notifier; Run sends what Progress queues.
func New(apis APIs, targets Targets, log *slog.Logger) *Notifier {
	return &Notifier{APIs: apis, Targets: targets, Log: log,
		Backoff: func(n int) time.Duration { return time.Duration(n*n) * 2 * time.Second },
		queue:   make(chan events.Progress, queueSize), sent: cache.NewLRUExpireCache(10 * queueSize)}
}

// Configured reports whether any notification service is configured: with
// none, a rollout's progress need not be sent for notifications' sake.
func (n *Notifier) Configured() bool {
	a, err := n.APIs.GetAPI()
	return err == nil && a != nil && len(a.GetNotificationServices()) > 0
}

// Progress queues p; it never blocks. A full queue drops p, with a log line.
func (n *Notifier) Progress(p events.Progress) {
	if !strings.HasPrefix(p.Type, events.ProgressPrefix) {
		return // a wave's event: no single target to subscribe on
	}
	select {
	case n.queue <- p:
	default:
		n.Metrics.count("", resultDropped)
		n.Log.Warn("notification dropped: the queue is full", "event", p.ID, "type", p.Type)
	}
}

// Run sends queued events until ctx is done.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-n.queue:
			n.notify(ctx, p)
		}
	}
}

// Trigger is the trigger a progress event fires: on-rollout-started,
// on-rollout-rolled-back, …
func Trigger(eventType string) string {
	name := strings.TrimPrefix(eventType, events.ProgressPrefix)
	if name == "rolledback" {
		name = "rolled-back"
	}
	return "on-rollout-" + name
}

// notify sends p to every destination subscribed to its trigger.
func (n *Notifier) notify(ctx context.Context, p events.Progress) {
	a, err := n.APIs.GetAPI()
	if err != nil {
		n.Log.Warn("notifications not sent: their configuration is invalid", "configmap", ConfigName, "error", err)
		return
	}
	if a == nil || len(a.GetNotificationServices()) == 0 {
		return
	}
	d := p.Data
	t := knative.TargetRef{Namespace: d.Namespace, Kind: d.Kind, Name: d.Name}
	labels, annotations, err := n.Targets.Metadata(ctx, t)
	if err != nil {
		n.Log.Warn("notifications not sent: cannot read the target's subscriptions", "target", t.String(), "error", err)
		return
	}
	trigger := Trigger(p.Type)
	cfg := a.GetConfig()
	dests := cfg.GetGlobalDestinations(labels)
	dests.Merge(subscriptions.NewAnnotations(own(annotations)).GetDestinations(cfg.DefaultTriggers, cfg.ServiceDefaultTriggers))
	dests = dests.Dedup()
	if len(dests[trigger]) == 0 {
		return
	}
	vars, err := n.vars(p, trigger)
	if err != nil {
		n.Log.Warn("notifications not sent", "event", p.ID, "error", err)
		return
	}
	results, err := a.RunTrigger(trigger, vars)
	if err != nil {
		n.Log.Warn("notifications not sent: the trigger failed", "trigger", trigger, "error", err)
		return
	}
	for _, r := range results {
		if !r.Triggered {
			continue
		}
		for _, dest := range dests[trigger] {
			key := p.ID + "|" + trigger + "|" + r.Key + "|" + dest.Service + ":" + dest.Recipient
			if _, done := n.sent.Get(key); done {
				continue
			}
			if err := n.send(ctx, a, vars, r.Templates, dest); err != nil {
				n.Metrics.count(dest.Service, resultFailed)
				n.Log.Warn("notification not sent", "target", t.String(), "trigger", trigger, "service", dest.Service,
					"recipient", dest.Recipient, "error", err)
				continue
			}
			n.sent.Add(key, true, sentTTL)
			n.Metrics.count(dest.Service, resultSent)
		}
	}
}

// own keeps the subscription annotations: notifications-engine reads every
// other annotation as a subscription with no service.
func own(annotations map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix+"/") {
			out[k] = v
		}
	}
	return out
}

// send tries a notification a few times: chat services refuse now and then.
func (n *Notifier) send(ctx context.Context, a api.API, vars map[string]any, templates []string, dest services.Destination) error {
	var err error
	for try := 0; try < attempts; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(n.Backoff(try)):
			}
		}
		if err = a.Send(vars, templates, dest); err == nil {
			return nil
		}
	}
	return err
}

// vars is what templates and trigger conditions see: .rollout (the
// progress event's data), .event (the whole event, with its trigger),
// .target ("namespace/name") and .url (the workflow in the Temporal UI).
func (n *Notifier) vars(p events.Progress, trigger string) (map[string]any, error) {
	var ev map[string]any
	b, err := json.Marshal(p)
	if err == nil {
		err = json.Unmarshal(b, &ev)
	}
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", p.ID, err)
	}
	ev["trigger"] = trigger
	link := ""
	if n.UI != "" && p.Data.WorkflowID != "" {
		link = fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimSuffix(n.UI, "/"),
			url.PathEscape(n.Namespace), url.PathEscape(p.Data.WorkflowID))
	}
	return map[string]any{"rollout": ev["data"], "event": ev, "target": p.Data.Namespace + "/" + p.Data.Name, "url": link}, nil
}

// Triggers lists the triggers progress events fire, sorted.
func Triggers() []string {
	var out []string
	for _, typ := range []string{events.ProgressStarted, events.ProgressStep, events.ProgressPaused, events.ProgressResumed,
		events.ProgressPromoted, events.ProgressSucceeded, events.ProgressRolledBack, events.ProgressAborted,
		events.ProgressFailed, events.ProgressSuperseded, events.ProgressAnalysis} {
		out = append(out, Trigger(typ))
	}
	slices.Sort(out)
	return out
}
