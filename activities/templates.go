package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/templates"
)

// ErrTemplate: the analysis template a target names is missing or does
// not fit the target's arguments.
const ErrTemplate = "AnalysisTemplate"

// TemplateInput asks for the analysis a target's template gives it.
type TemplateInput struct {
	Target knative.TargetRef  `json:"target"`
	Ref    config.TemplateRef `json:"ref"`
}

// TemplateAnalysis is a template's analysis for a target, and the
// template's resource version it was read at.
type TemplateAnalysis struct {
	Analysis *config.Analysis `json:"analysis"`
	Version  string           `json:"version,omitempty"`
}

// ReadAnalysisTemplate reads the analysis template a running rollout names
// again, when its operator asks (reload-analysis). A template missing or
// wrong now is a non-retryable error: the rollout keeps what it has.
func (a *Activities) ReadAnalysisTemplate(ctx context.Context, in TemplateInput) (TemplateAnalysis, error) {
	out, err := a.analysisOf(ctx, in.Target, in.Ref)
	var bad *templateError
	if errors.As(err, &bad) {
		return out, temporal.NewNonRetryableApplicationError(bad.Error(), ErrTemplate, nil)
	}
	return out, err
}

// applyTemplate reads the analysis template the policy names and fills
// in its analysis: what the template says when the rollout starts, kept in
// the rollout's history, so a later edit of the template changes the
// rollouts that start after it, not the running ones. A template that is
// missing or wrong refuses the rollout before any traffic moves.
func (a *Activities) applyTemplate(ctx context.Context, t knative.TargetRef, policy *config.Policy, object knative.ObjectRef) error {
	out, err := a.analysisOf(ctx, t, *policy.AnalysisTemplate)
	var bad *templateError
	switch {
	case errors.As(err, &bad):
		return a.refuse(fmt.Sprintf("%s: invalid rollout policy: %v", t, bad), ErrInvalidPolicy, object)
	case err != nil:
		return err
	}
	policy.Analysis = out.Analysis
	policy.AnalysisTemplate.Version = out.Version
	return nil
}

// templateError is a template the target's owner or the platform team
// must fix; other errors (the API server) are retried.
type templateError struct{ error }

func (a *Activities) analysisOf(ctx context.Context, t knative.TargetRef, ref config.TemplateRef) (TemplateAnalysis, error) {
	if a.Templates == nil {
		return TemplateAnalysis{}, &templateError{fmt.Errorf("%s names %s %s, but this worker cannot read analysis templates", config.AnnotationAnalysisTemplate, ref.Kind(), ref.Name)}
	}
	tmpl, err := a.Templates.Read(ctx, t.Namespace, ref)
	var nf *templates.NotFoundError
	switch {
	case errors.As(err, &nf):
		return TemplateAnalysis{}, &templateError{err}
	case err != nil:
		return TemplateAnalysis{}, err
	}
	an, err := config.ApplyTemplate(ref, tmpl.Spec, a.Defaults)
	if err != nil {
		return TemplateAnalysis{}, &templateError{err}
	}
	return TemplateAnalysis{Analysis: an, Version: tmpl.Version}, nil
}
