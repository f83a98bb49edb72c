package main

import (
	"context"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/templates"
)

// templateSource finds the analysis template a target names, in the
// namespace the target is in.
type templateSource func(ctx context.Context, namespace string, ref config.TemplateRef) (config.TemplateSpec, error)

// templatesIn finds templates among the linted documents: a policy and the
// templates it names can be checked together, before either is applied.
func templatesIn(docs []lintDoc) templateSource {
	found := map[string]config.TemplateSpec{}
	for _, d := range docs {
		if d.APIVersion != "sluice.dev/v1alpha1" || (d.Kind != "AnalysisTemplate" && d.Kind != "ClusterAnalysisTemplate") {
			continue
		}
		var obj struct {
			Spec config.TemplateSpec `json:"spec"`
		}
		if err := yaml.Unmarshal(d.raw, &obj); err != nil {
			continue // lintOne reports the document
		}
		found[templateKey(d.Kind == "ClusterAnalysisTemplate", d.Metadata.Namespace, d.Metadata.Name)] = obj.Spec
	}
	return func(_ context.Context, namespace string, ref config.TemplateRef) (config.TemplateSpec, error) {
		if spec, ok := found[templateKey(ref.Cluster, namespace, ref.Name)]; ok {
			return spec, nil
		}
		return config.TemplateSpec{}, fmt.Errorf("%s %s is not among the documents linted: lint it with the target (sluice lint service.yaml template.yaml), or lint the live Service with --service",
			ref.Kind(), ref.Name)
	}
}

func templateKey(cluster bool, namespace, name string) string {
	if cluster {
		return "cluster/" + name
	}
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + name
}

// templatesFrom reads templates from the cluster.
func templatesFrom(r templates.Reader) templateSource {
	return func(ctx context.Context, namespace string, ref config.TemplateRef) (config.TemplateSpec, error) {
		t, err := r.Read(ctx, namespace, ref)
		return t.Spec, err
	}
}

// checkTemplate fills the policy's analysis from the template it names, or
// says why it cannot: the same refusal the worker gives before any traffic
// moves.
func checkTemplate(ctx context.Context, src templateSource, namespace string, p *config.Policy, d config.Defaults) *config.Finding {
	ref := p.AnalysisTemplate
	if ref == nil || src == nil {
		return nil
	}
	if namespace == "" {
		namespace = "default"
	}
	spec, err := src(ctx, namespace, *ref)
	if err == nil {
		p.Analysis, err = config.ApplyTemplate(*ref, spec, d)
	}
	if err != nil {
		return &config.Finding{Key: config.AnnotationAnalysisTemplate, Severity: config.SeverityError, Value: ref.String(), Message: err.Error()}
	}
	return nil
}
