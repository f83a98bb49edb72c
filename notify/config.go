package notify

import (
	_ "embed"
	"fmt"
	"maps"
	"strings"

	"github.com/argoproj/notifications-engine/pkg/api"
	"github.com/argoproj/notifications-engine/pkg/services"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

//go:embed builtin.yaml
var builtinYAML []byte

// Builtin is sluice's own triggers and templates, parsed.
func Builtin() (*api.Config, error) {
	var data map[string]string
	if err := yaml.Unmarshal(builtinYAML, &data); err != nil {
		return nil, fmt.Errorf("built-in notifications: %w", err)
	}
	return api.ParseConfig(&corev1.ConfigMap{Data: data}, &corev1.Secret{})
}

// Settings configures notifications-engine's api.Factory for sluice: the
// ConfigMap and Secret named ConfigName in namespace, over sluice's
// built-in triggers and templates.
func Settings(namespace string) (api.Settings, error) {
	builtin, err := Builtin()
	if err != nil {
		return api.Settings{}, err
	}
	return api.Settings{ConfigMapName: ConfigName, SecretName: ConfigName, DefaultNamespace: namespace,
		InitGetVars: func(cfg *api.Config, cm *corev1.ConfigMap, _ *corev1.Secret) (api.GetVars, error) {
			complete(cfg, builtin, webhooks(cm))
			return func(obj map[string]any, _ services.Destination) map[string]any { return maps.Clone(obj) }, nil
		}}, nil
}

// complete adds to cfg what the user left out: the built-in triggers and
// templates, the default triggers, and for each webhook service a request
// per template — a POST of the progress event as JSON — unless the
// template says otherwise.
func complete(cfg *api.Config, builtin *api.Config, webhooks []string) {
	for name, t := range builtin.Triggers {
		if _, ok := cfg.Triggers[name]; !ok {
			cfg.Triggers[name] = t
		}
	}
	for name, t := range builtin.Templates {
		if _, ok := cfg.Templates[name]; !ok {
			cfg.Templates[name] = t
		}
	}
	if len(cfg.DefaultTriggers) == 0 {
		cfg.DefaultTriggers = builtin.DefaultTriggers
	}
	for name, t := range cfg.Templates {
		for _, hook := range webhooks {
			if _, ok := t.Webhook[hook]; ok {
				continue
			}
			// A copy: the built-in templates' maps are shared.
			t.Webhook = maps.Clone(t.Webhook)
			if t.Webhook == nil {
				t.Webhook = services.WebhookNotifications{}
			}
			t.Webhook[hook] = services.WebhookNotification{Method: "POST", Body: "{{toJson .event}}"}
		}
		cfg.Templates[name] = t
	}
}

// webhooks names the webhook services the ConfigMap configures
// (service.webhook, service.webhook.NAME).
func webhooks(cm *corev1.ConfigMap) []string {
	var out []string
	for k := range cm.Data {
		switch parts := strings.Split(k, "."); {
		case len(parts) == 2 && parts[0] == "service" && parts[1] == "webhook":
			out = append(out, "webhook")
		case len(parts) == 3 && parts[0] == "service" && parts[1] == "webhook":
			out = append(out, parts[2])
		}
	}
	return out
}

// Results of one notification.
const (
	resultSent    = "sent"
	resultFailed  = "failed"
	resultDropped = "dropped"
)

// Metrics counts notifications on the worker's /metrics.
type Metrics struct{ total *prometheus.CounterVec }

// NewMetrics registers the notification metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_notifications_total",
		Help: "Notifications, by service and result (sent; failed after retries; dropped when the queue was full)."},
		[]string{"service", "result"})}
	reg.MustRegister(m.total)
	return m
}

func (m *Metrics) count(service, result string) {
	if m != nil {
		m.total.WithLabelValues(service, result).Inc()
	}
}
