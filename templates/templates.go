// Package templates reads sluice's shared analysis templates: the
// AnalysisTemplate (namespaced) and ClusterAnalysisTemplate (cluster-wide)
// resources a target names with sluice.dev/analysis-template.
package templates

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sluicehq/sluice/config"
)

// The templates' resources.
var (
	Namespaced = schema.GroupVersionResource{Group: "sluice.dev", Version: "v1alpha1", Resource: "analysistemplates"}
	Cluster    = schema.GroupVersionResource{Group: "sluice.dev", Version: "v1alpha1", Resource: "clusteranalysistemplates"}
)

// Template is a template as read: its spec, and the resource version it
// was read at (shown with the rollout that used it).
type Template struct {
	Spec    config.TemplateSpec
	Version string
}

// NotFoundError is a reference to a template that does not exist.
type NotFoundError struct {
	Ref       config.TemplateRef
	Namespace string
}

func (e *NotFoundError) Error() string {
	where := e.Ref.Kind() + " " + e.Ref.Name
	if !e.Ref.Cluster {
		where = e.Ref.Kind() + " " + e.Namespace + "/" + e.Ref.Name
	}
	return fmt.Sprintf("%s: %s not found; create it, or fix the name (NAME for an AnalysisTemplate in the target's namespace, cluster/NAME for a ClusterAnalysisTemplate)",
		config.AnnotationAnalysisTemplate, where)
}

// Source is where templates are read from: a Reader, or a test's map.
type Source interface {
	Read(ctx context.Context, namespace string, ref config.TemplateRef) (Template, error)
}

// Reader reads templates through the Kubernetes API.
type Reader struct {
	Dynamic dynamic.Interface
}

// Read reads the template ref names for a target in namespace.
func (r Reader) Read(ctx context.Context, namespace string, ref config.TemplateRef) (Template, error) {
	var res dynamic.ResourceInterface = r.Dynamic.Resource(Namespaced).Namespace(namespace)
	if ref.Cluster {
		res = r.Dynamic.Resource(Cluster)
	}
	u, err := res.Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Template{}, &NotFoundError{Ref: ref, Namespace: namespace}
	case err != nil:
		return Template{}, fmt.Errorf("read %s %s: %w", ref.Kind(), ref.Name, err)
	}
	return Decode(u.Object, u.GetResourceVersion())
}

// Decode reads a template object's spec.
func Decode(obj map[string]any, version string) (Template, error) {
	b, err := json.Marshal(obj["spec"])
	if err != nil {
		return Template{}, err
	}
	var spec config.TemplateSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return Template{}, fmt.Errorf("decode the template's spec: %w", err)
	}
	return Template{Spec: spec, Version: version}, nil
}
