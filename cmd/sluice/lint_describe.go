package main

// What lint prints of a valid policy: the plan the worker would run.

import (
	"fmt"
	"strconv"
	"strings"

	"knative.dev/serving/pkg/apis/autoscaling"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
)

// describeStages lists a capacity plan's stages as the worker derives them,
// for the stable pods given, else the template's min-scale.
func describeStages(p config.Policy, doc lintDoc, stablePods int32) []string {
	if p.Capacity == nil {
		return nil
	}
	from := "--stable-pods"
	if stablePods == 0 {
		raw := doc.Spec.Template.Metadata.Annotations[autoscaling.MinScaleAnnotationKey]
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 1 {
			return []string{fmt.Sprintf("capacity (%s): the stages are derived from the stable's Ready pods when the rollout starts; pass --stable-pods N to see them", p.Capacity.Strategy)}
		}
		stablePods, from = int32(n), "the template's min-scale"
	}
	stages, err := p.Stages(stablePods)
	if err != nil {
		return []string{fmt.Sprintf("capacity (%s) at %d stable pods (%s): the rollout would fail: %v", p.Capacity.Strategy, stablePods, from, err)}
	}
	out := []string{fmt.Sprintf("capacity (%s), %d stages for a stable of %d pods (%s), each within %s:",
		p.Capacity.Strategy, len(stages), stablePods, from, p.Capacity.StageTimeout)}
	for i, s := range stages {
		out = append(out, fmt.Sprintf("  stage %d: candidate %d pods, stable %d pods, %d%% of traffic", i+1, s.Candidate, s.Stable, s.Weight))
	}
	return out
}

func describePolicy(p config.Policy) string {
	steps := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		steps[i] = fmt.Sprintf("%d%%", s.Weight)
		if s.Gate {
			steps[i] = "gate, " + steps[i]
		}
		if i < len(p.Steps)-1 {
			steps[i] += " for " + s.Hold.String()
		}
	}
	out := fmt.Sprintf("%s; Ready within %s, verified within %s, done within %s",
		strings.Join(steps, " → "), p.ProgressDeadline, p.VerifyTimeout, p.Deadline)
	if wv := p.Waves; wv != nil {
		var waves []string
		for _, w := range wv.Waves {
			part := strings.Join(w.Clusters, ", ")
			if w.Soak > 0 {
				part += " (soak " + w.Soak.String() + ")"
			}
			if w.Gate {
				part += " (gate)"
			}
			waves = append(waves, part)
		}
		out += "; waves: " + strings.Join(waves, " → ") + ", on failure " + wv.OnFailure
	}
	if p.RollbackWindow > 0 {
		out += "; a Revision of a template that had 100% within " + p.RollbackWindow.String() + " goes to 100% in one write"
	}
	if an := p.Analysis; an != nil {
		var parts []string
		for _, c := range an.Checks {
			part := fmt.Sprintf("%s in %s", c.Name, analysis.Range(c.Min, c.Max))
			if cp := c.Compare; cp != nil {
				part = fmt.Sprintf("%s against the stable (%s is bad beyond %s at %g%%, %d samples a side every %s over %s",
					c.Name, cp.Direction, cp.Effect, cp.Confidence*100, cp.MinSamples, c.Step, c.Window)
				if c.Weight != 1 {
					part += fmt.Sprintf(", weight %g", c.Weight)
				}
				if c.Critical {
					part += ", critical"
				}
				part += ")"
			}
			if c.DryRun {
				part += " (dry run)"
			}
			parts = append(parts, part)
		}
		for _, h := range an.Webhooks {
			parts = append(parts, fmt.Sprintf("webhook %s (%s)", h.Name, h.At))
		}
		out += fmt.Sprintf("; analysis every %s: %s", an.Interval, strings.Join(parts, ", "))
		if len(an.Checks) > 0 {
			out += " from " + an.Prometheus
		}
		if an.Comparisons() {
			out += fmt.Sprintf("; a round's score passes at %g, is marginal from %g", an.Score.Pass, an.Score.Marginal)
		}
		for _, c := range an.Checks {
			if c.Builtin != "" {
				out += " (built-ins over Knative's " + an.KnativeMetrics + " metric names)"
				break
			}
		}
	}
	return out
}
