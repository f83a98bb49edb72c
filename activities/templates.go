package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/templates"
)

// TemplateReader reads a shared analysis template (templates.Reader).
type TemplateReader interface {
	Read(ctx context.Context, namespace string, ref config.TemplateRef) (templates.Template, error)
}

// applyTemplate reads the analysis template the policy names and fills
// in its analysis: what the template says when the rollout starts, kept in
// the rollout's history, so a later edit of the template changes the
// rollouts that start after it, not the running ones. A template that is
// missing or wrong refuses the rollout before any traffic moves.
func (a *Activities) applyTemplate(ctx context.Context, t knative.TargetRef, policy *config.Policy, object knative.ObjectRef) error {
	ref := policy.AnalysisTemplate
	if a.Templates == nil {
		return a.refuse(fmt.Sprintf("%s: %s names %s %s, but this worker cannot read analysis templates", t, config.AnnotationAnalysisTemplate, ref.Kind(), ref.Name), ErrInvalidPolicy, object)
	}
	tmpl, err := a.Templates.Read(ctx, t.Namespace, *ref)
	var nf *templates.NotFoundError
	switch {
	case errors.As(err, &nf):
		return a.refuse(fmt.Sprintf("%s: invalid rollout policy: %v", t, err), ErrInvalidPolicy, object)
	case err != nil:
		return err
	}
	an, err := config.ApplyTemplate(*ref, tmpl.Spec, a.Defaults)
	if err != nil {
		return a.refuse(fmt.Sprintf("%s: invalid rollout policy: %v", t, err), ErrInvalidPolicy, object)
	}
	policy.Analysis = an
	policy.AnalysisTemplate.Version = tmpl.Version
	return nil
}
