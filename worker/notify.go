package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/argoproj/notifications-engine/pkg/api"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/notify"
)

// EnvNotificationsNamespace is the namespace of the sluice-notifications
// ConfigMap and Secret (the deployment sets it to the worker's own); unset,
// the worker sends no notifications.
const EnvNotificationsNamespace = "SLUICE_NOTIFICATIONS_NAMESPACE"

// NewNotifier returns the notifier and what runs it (the informers on its
// ConfigMap and Secret, and the sender), or nil when notifications are off.
func NewNotifier(cfg *rest.Config, temporalNamespace string, log *slog.Logger) (*notify.Notifier, func(context.Context), error) {
	ns := os.Getenv(EnvNotificationsNamespace)
	if ns == "" {
		log.Info("notifications off: no namespace for their configuration", "env", EnvNotificationsNamespace)
		return nil, nil, nil
	}
	// notifications-engine logs through logrus, at info for every change
	// of its configuration; sluice's own log says what matters.
	logrus.SetLevel(logrus.WarnLevel)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata client: %w", err)
	}
	settings, err := notify.Settings(ns)
	if err != nil {
		return nil, nil, err
	}
	// Only the two objects: the worker reads no other ConfigMap or Secret.
	inf := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", notify.ConfigName).String()
		}))
	cms, secrets := inf.Core().V1().ConfigMaps().Informer(), inf.Core().V1().Secrets().Informer()
	n := notify.New(api.NewFactory(settings, ns, secrets, cms), targetMetadata{meta}, log)
	n.UI, n.Namespace = os.Getenv(EnvTemporalUI), temporalNamespace
	run := func(ctx context.Context) {
		inf.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), cms.HasSynced, secrets.HasSynced) {
			return
		}
		log.Info("notifications configured from", "configmap", ns+"/"+notify.ConfigName, "on", n.Configured())
		n.Run(ctx)
	}
	return n, run, nil
}

// targetMetadata reads targets' labels and annotations, nothing more.
type targetMetadata struct{ client metadata.Interface }

func (m targetMetadata) Metadata(ctx context.Context, t knative.TargetRef) (map[string]string, map[string]string, error) {
	gvr := schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: strings.ToLower(t.Kind) + "s"}
	obj, err := m.client.Resource(gvr).Namespace(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", t, err)
	}
	return obj.GetLabels(), obj.GetAnnotations(), nil
}
