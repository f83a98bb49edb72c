package config

import (
	"strings"
	"testing"
)

func TestTemplateReference(t *testing.T) {
	p, err := FromAnnotations(map[string]string{AnnotationAnalysisTemplate: "cluster/slo", AnnotationAnalysisArgs: "p99=300, team=cart"}, BuiltinDefaults())
	if err != nil || p.AnalysisTemplate == nil || !p.AnalysisTemplate.Cluster || p.AnalysisTemplate.Name != "slo" ||
		p.AnalysisTemplate.Args["p99"] != "300" || p.AnalysisTemplate.Args["team"] != "cart" || p.Analysis != nil {
		t.Fatalf("policy %+v, %v", p.AnalysisTemplate, err)
	}
	for _, c := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{AnnotationAnalysisTemplate: "slo", AnnotationAnalysis: "checks: []"}, "are both set; keep one"},
		{map[string]string{AnnotationAnalysisArgs: "p99=300"}, "has no template to give them to"},
		{map[string]string{AnnotationAnalysisTemplate: "Bad_Name"}, "must name an AnalysisTemplate"},
		{map[string]string{AnnotationAnalysisTemplate: "slo", AnnotationAnalysisArgs: "p99"}, `"p99" is not name=value`},
	} {
		if _, err := FromAnnotations(c.ann, BuiltinDefaults()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.ann, err, c.want)
		}
	}
}

func TestApplyTemplate(t *testing.T) {
	def := "0.99"
	spec := TemplateSpec{
		Analysis: "prometheus: http://prometheus:9090\nchecks:\n  - {name: latency, builtin: latency-p99, max: {{args.p99}}}\n  - {name: errors, builtin: success-rate, min: {{ args.min }}}\n",
		Args:     []TemplateArg{{Name: "p99"}, {Name: "min", Value: &def}},
	}
	ref := TemplateRef{Name: "slo", Args: map[string]string{"p99": "300"}}
	an, err := ApplyTemplate(ref, spec, BuiltinDefaults())
	if err != nil || len(an.Checks) != 2 || *an.Checks[0].Max != 300 || *an.Checks[1].Min != 0.99 {
		t.Fatalf("analysis %+v, %v", an, err)
	}
	for _, c := range []struct {
		ref  TemplateRef
		spec TemplateSpec
		want string
	}{
		{TemplateRef{Name: "slo"}, spec, "argument p99 has no value; give it in sluice.dev/analysis-args"},
		{TemplateRef{Name: "slo", Args: map[string]string{"p99": "1", "p50": "1"}}, spec, "AnalysisTemplate slo takes no argument p50 (it takes p99, min)"},
		{ref, TemplateSpec{Analysis: "checks:\n  - {name: x, builtin: success-rate, min: {{args.nope}}}\n", Args: spec.Args}, "uses {{args.nope}} but declares no such argument"},
		{TemplateRef{Cluster: true, Name: "slo", Args: map[string]string{"p99": "fast"}}, spec, "ClusterAnalysisTemplate slo: sluice.dev/analysis"},
	} {
		if _, err := ApplyTemplate(c.ref, c.spec, BuiltinDefaults()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.ref, err, c.want)
		}
	}
}
