package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/measure"
)

// measureChecks runs each check of svc's policy once, as a rollout of
// revision (default the latest created) would at its current traffic.
func measureChecks(ctx context.Context, w io.Writer, svc *servingv1.Service, revision string, d config.Defaults) error {
	p, err := config.FromAnnotations(svc.Annotations, d)
	if err != nil {
		return err
	}
	if p.Analysis == nil || len(p.Analysis.Checks) == 0 {
		fmt.Fprintf(w, "Service %s has no checks to measure\n", svc.Name)
		return nil
	}
	vars := config.TemplateVars{Namespace: svc.Namespace, Service: svc.Name, Configuration: svc.Name,
		Candidate: cmp.Or(revision, svc.Status.LatestCreatedRevisionName)}
	var most int64 = -1
	for _, t := range svc.Status.Traffic {
		pct := ptr.Deref(t.Percent, 0)
		if t.RevisionName == vars.Candidate {
			vars.Weight += pct
		} else if pct > most {
			vars.Stable, most = t.RevisionName, pct
		}
	}
	if vars.Candidate == "" {
		return fmt.Errorf("service %s/%s has no Revision yet: name one with --revision", svc.Namespace, svc.Name)
	}
	fmt.Fprintf(w, "Measuring %s (%d%% of traffic) once, at %s:\n", vars.Candidate, vars.Weight, p.Analysis.Prometheus)
	var ms measure.Measurer
	failed := 0
	for _, c := range p.Analysis.Checks {
		m := ms.Check(ctx, measure.CheckInput{Check: c, Prometheus: p.Analysis.Prometheus, Vars: vars})
		fmt.Fprintf(w, "  %s\n", m.Summary())
		if m.Result != analysis.Passed {
			failed++
		}
		if query, err := config.RenderQuery(c.Query, withWindow(vars, c)); err == nil {
			fmt.Fprintf(w, "    query: %s\n", query)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks did not pass", failed, len(p.Analysis.Checks))
	}
	return nil
}

// withWindow is v as a check's query sees it: a comparison's query as run
// for the candidate, over one step.
func withWindow(v config.TemplateVars, c config.Check) config.TemplateVars {
	v.Window, v.Revision = config.PromDuration(c.Window), v.Candidate
	if c.Compare != nil {
		v.Window = config.PromDuration(c.Step)
	}
	return v
}
