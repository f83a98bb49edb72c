package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
)

// NotificationPrefix starts the annotations that subscribe a target to
// notifications: notifications.sluice.dev/subscribe.TRIGGER.SERVICE:
// recipients (docs/notifications.md).
const NotificationPrefix = "notifications.sluice.dev/"

// NotificationTriggers are the triggers sluice fires, one per kind of
// progress event; a subscription to any other would never send anything.
var NotificationTriggers = []string{
	"on-rollout-aborted", "on-rollout-analysis", "on-rollout-failed", "on-rollout-paused", "on-rollout-promoted",
	"on-rollout-resumed", "on-rollout-rolled-back", "on-rollout-started", "on-rollout-step", "on-rollout-succeeded",
	"on-rollout-superseded",
}

// subscription checks one notifications.sluice.dev/ annotation: a
// subscription that names a trigger sluice never fires, or no recipient,
// would send nothing and say nothing.
func subscription(key, value string) error {
	rest := strings.TrimPrefix(key, NotificationPrefix)
	if rest == "subscriptions" {
		return nil // the YAML form, checked by notifications-engine when it sends
	}
	spec, ok := strings.CutPrefix(rest, "subscribe.")
	parts := strings.Split(spec, ".")
	if !ok || len(parts) > 2 || slices.Contains(parts, "") {
		return &FieldError{Key: key, Value: value,
			Message: "is not a notification subscription; write " + NotificationPrefix + "subscribe.TRIGGER.SERVICE (or subscribe.SERVICE for the default triggers) with the recipients as its value"}
	}
	if len(parts) == 2 && !slices.Contains(NotificationTriggers, parts[0]) {
		msg := fmt.Sprintf("subscribes to trigger %s, which sluice never fires", parts[0])
		if near := nearestTrigger(parts[0]); near != "" {
			msg += fmt.Sprintf("; did you mean %s?", near)
		} else {
			msg += "; the triggers are " + strings.Join(NotificationTriggers, ", ")
		}
		return &FieldError{Key: key, Value: value, Message: msg}
	}
	if strings.Trim(value, " ;") == "" {
		return &FieldError{Key: key, Value: value,
			Message: "names no recipient, so nothing is sent; give a channel (Slack), a recipient name (Teams), or any word (a webhook)"}
	}
	return nil
}

// argoTriggers are Argo Rollouts' names for sluice's triggers, which users
// coming from it will write.
var argoTriggers = map[string]string{
	"on-rollout-completed":      "on-rollout-succeeded",
	"on-rollout-step-completed": "on-rollout-step",
	"on-rollout-updated":        "on-rollout-started",
	"on-analysis-run-failed":    "on-rollout-paused",
}

// nearestTrigger is the trigger name most likely meant, if one is close.
func nearestTrigger(name string) string {
	if t, ok := argoTriggers[name]; ok {
		return t
	}
	best, bestDist := "", 0
	for _, t := range NotificationTriggers {
		short := strings.TrimPrefix(t, "on-rollout-")
		d := min(levenshtein.ComputeDistance(name, t), levenshtein.ComputeDistance(strings.TrimPrefix(name, "on-"), short))
		if best == "" || d < bestDist {
			best, bestDist = t, d
		}
	}
	if bestDist > max(2, len(name)/3) {
		return ""
	}
	return best
}
