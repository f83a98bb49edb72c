package config

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goWords are words of Go's decoders and types that no message may show.
var goWords = regexp.MustCompile(`Go (value|struct)|unmarshal|config\.|[a-z]Doc\b|json|map\[|\[\]|reflect`)

// FuzzPolicy: every set of annotations gives a valid policy or errors that
// each name an annotation, in words without Go; and a valid policy never
// runs on a default where a sluice.dev/ key was set (an unknown key is an
// error, a known one takes effect).
func FuzzPolicy(f *testing.F) {
	seeds := [][6]string{
		{AnnotationRollout, "enabled", "sluice.dev/gate", "100", AnnotationSteps, "10,50,100"},
		{AnnotationRollout, "enabled", AnnotationGates, "50,50", AnnotationStepHolds, "100=1h"},
		{AnnotationRollout, "enabled", AnnotationHold, "60", AnnotationDeadline, "1m"},
		{AnnotationRollout, "enabled", AnnotationAnalysis, "checks: [{name: a, builtin: success-rate, dryRun: x}]", AnnotationWaves, "waves: [{clusters: a}]"},
		{AnnotationRollout, "enabled", AnnotationAnalysis, "prometheus: http://p\ncompare: 3\nchecks: [{name: a, builtin: latency-mean, compare: {effect: 5%}}]", AnnotationCapacity, "availability"},
		{AnnotationRollout, "enabled", AnnotationCapacity, "resource", AnnotationCapacitySurge, "2"},
		{AnnotationRollout, "enabled", AnnotationWaves, "onFailure: rollback\nwaves: [{clusters: [a], soak: 1h, gate: true}, {clusters: [b]}]", "sluice.io/steps", "50,100"},
		{"sluice.dev/rolout", "enabled", AnnotationSteps, "50,100", AnnotationRoute, "r"},
		{AnnotationRollout, "enabled", AnnotationVerifyTimeout, "0s", AnnotationProgressDeadline, "-1m"},
		{AnnotationRollout, "enabled", AnnotationAnalysis, "- a\n- b", AnnotationAnalysis + "x", "y"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	d := BuiltinDefaults()
	d.PrometheusURL = "http://prometheus:9090"
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		m := map[string]string{k1: v1, k2: v2, k3: v3}
		review := ReviewPolicy(Subject{Kind: "Service", Annotations: m, TemplateAnnotations: map[string]string{k3: v3}}, d)
		for _, f := range review.Findings {
			if f.Key == "" || goWords.MatchString(f.Message) {
				t.Fatalf("finding %q: names no key, or shows Go", f.String())
			}
		}
		p, err := FromAnnotations(m, d)
		if err != nil {
			for _, e := range flatten(err) {
				var fe *FieldError
				if !errors.As(e, &fe) {
					t.Fatalf("error %q is not a FieldError", e)
				}
				if _, set := m[fe.Key]; !set && fe.Key != AnnotationDeadline+" (default)" && fe.Key != "default steps" {
					t.Fatalf("error names %q, which is not among the annotations: %v", fe.Key, e)
				}
				if goWords.MatchString(fe.Message) {
					t.Fatalf("error shows Go: %v", e)
				}
			}
			return
		}
		for key, raw := range m {
			if !strings.HasPrefix(key, Prefix) {
				continue
			}
			k, known := lookup(key)
			if !known || !k.Target {
				t.Fatalf("%s is not a target key, yet the policy is valid", key)
			}
			if !takesEffect(p, key, raw) {
				t.Fatalf("%s: %q was set, but the policy %+v runs on its default", key, raw, p)
			}
		}
	})
}

// takesEffect reports whether the policy shows the value of one key.
func takesEffect(p Policy, key, raw string) bool {
	dur := func(got time.Duration) bool {
		want, err := time.ParseDuration(strings.TrimSpace(raw))
		return err == nil && got == want
	}
	switch key {
	case AnnotationSteps:
		w, err := parseWeights(key, raw)
		return err == nil && formatWeights(w) == formatStepWeights(p.Steps)
	case AnnotationHold:
		want, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return false
		}
		for _, s := range p.Steps {
			if s.Hold == want {
				return true
			}
		}
		return len(p.Steps) == 1 // warned of: the only step never holds
	case AnnotationProgressDeadline:
		return dur(p.ProgressDeadline)
	case AnnotationVerifyTimeout:
		return dur(p.VerifyTimeout)
	case AnnotationDeadline:
		return dur(p.Deadline)
	case AnnotationGates:
		for _, s := range p.Steps {
			if s.Gate {
				return true
			}
		}
		return false
	case AnnotationAnalysis:
		return p.Analysis != nil
	case AnnotationWaves:
		return p.Waves != nil
	case AnnotationCapacity:
		return p.Capacity != nil
	case AnnotationCapacityTimeout:
		return p.Capacity != nil && dur(p.Capacity.StageTimeout)
	case AnnotationCapacitySurge, AnnotationCapacityOnTimeout:
		return p.Capacity != nil
	}
	return true // rollout (the opt-in itself), step-holds (checked by weight), route, ended
}
