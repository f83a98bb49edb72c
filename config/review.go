package config

import (
	"errors"
	"fmt"
	"strings"

	"knative.dev/serving/pkg/apis/serving"
)

// Subject is what a rollout policy is read from: the target's kind
// (Service or Configuration), its annotations, and those of its Revision
// template, where a policy is easily written by mistake.
type Subject struct {
	Kind                string
	Annotations         map[string]string
	TemplateAnnotations map[string]string
}

// Severity says whether a finding stops a rollout.
type Severity string

const (
	// SeverityError: the worker refuses the rollout; lint fails.
	SeverityError Severity = "error"
	// SeverityWarning: a setting that has no effect. The rollout runs as
	// if it were not there; lint still fails, so it is fixed.
	SeverityWarning Severity = "warning"
)

// Finding is one problem with a policy, as lint, the admission webhook and
// the receiver report it.
type Finding struct {
	Key      string   `json:"key"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
	Value    string   `json:"value,omitempty"`
}

func (f Finding) String() string {
	s := f.Key + ": " + f.Message
	if f.Value != "" {
		s += fmt.Sprintf(", got %q", f.Value)
	}
	if f.Severity == SeverityWarning {
		s = "warning: " + s
	}
	return s
}

// Review is what sluice makes of a target's annotations: whether it opted
// in, the policy the worker would run, and every finding.
type Review struct {
	OptedIn  bool      `json:"optedIn"`
	Policy   *Policy   `json:"policy,omitempty"`
	Findings []Finding `json:"findings,omitempty"`
}

// Errors counts the findings that stop a rollout.
func (r Review) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == SeverityError {
			n++
		}
	}
	return n
}

// Relevant reports whether the subject says anything to sluice at all: it
// opted in, or carries (or nearly carries) a sluice annotation.
func (r Review) Relevant() bool { return r.OptedIn || len(r.Findings) > 0 }

// ReviewPolicy reads s as the worker would and also says what the worker
// would silently do otherwise: keys it does not know, keys in the wrong
// place, settings with no effect, and a policy without its opt-in. The
// policy is set only when opted in without errors.
func ReviewPolicy(s Subject, d Defaults) Review {
	var r Review
	var errs, warns []error
	errs = append(errs, misplacedOnTemplate(s.Kind, s.TemplateAnnotations)...)
	opted, err := OptedIn(s.Annotations)
	switch {
	case err != nil:
		errs = append(errs, err)
		errs = append(errs, unknownKeys(s.Annotations)...)
	case !opted:
		errs = append(errs, unknownKeys(s.Annotations)...)
		errs = append(errs, missingOptIn(s.Annotations, errs)...)
	default:
		r.OptedIn = true
		p, perrs, pwarns := parsePolicy(s.Annotations, d)
		errs, warns = append(errs, perrs...), pwarns
		route, named := s.Annotations[AnnotationRoute]
		switch {
		case s.Kind == "Configuration" && strings.TrimSpace(route) == "" && !suggested(errs, AnnotationRoute):
			errs = append(errs, &FieldError{Key: AnnotationRoute, Value: route,
				Message: "a Configuration must name the Route its Revisions roll out on (Route mode)"})
		case s.Kind == "Service" && named:
			warns = append(warns, &FieldError{Key: AnnotationRoute, Value: route,
				Message: "has no effect on a Service, whose own spec.traffic sluice writes; remove it (Route mode is for a Configuration with a Route of its own)"})
		}
		if len(errs) == 0 {
			r.Policy = &p
		}
	}
	r.Findings = append(findings(errs, SeverityError), findings(warns, SeverityWarning)...)
	return r
}

// missingOptIn is the error of a target that carries policy keys without
// sluice.dev/rollout: they would do nothing. A misspelt opt-in key has its
// own error already.
func missingOptIn(annotations map[string]string, already []error) []error {
	if _, set := annotations[AnnotationRollout]; set {
		return nil // "disabled": off on purpose
	}
	if suggested(already, AnnotationRollout) {
		return nil
	}
	var policy []string
	for _, key := range sortedKeys(annotations) {
		if k, ok := lookup(key); ok && k.Place == OnTarget {
			policy = append(policy, key)
		}
	}
	if len(policy) == 0 {
		return nil
	}
	return []error{&FieldError{Key: AnnotationRollout, Message: fmt.Sprintf(
		"is not set, so sluice ignores %s; add %s: enabled to roll this target out", strings.Join(policy, ", "), AnnotationRollout)}}
}

// suggested reports whether an unknown key's error already suggests key:
// its absence is then that typo, not a second mistake.
func suggested(errs []error, key string) bool {
	for _, err := range errs {
		var fe *FieldError
		if errors.As(err, &fe) && strings.Contains(fe.Message, "did you mean "+key+"?") {
			return true
		}
	}
	return false
}

// findings flattens errors (joined or single) into findings of a severity.
func findings(errs []error, sev Severity) []Finding {
	var out []Finding
	for _, err := range errs {
		for _, e := range flatten(err) {
			f := Finding{Severity: sev, Message: e.Error()}
			var fe *FieldError
			if errors.As(e, &fe) {
				f.Key, f.Message, f.Value = fe.Key, fe.Message, fe.Value
			}
			out = append(out, f)
		}
	}
	return out
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// Object is a Service or Configuration read only as far as its policy, from
// its YAML or JSON: kind, name, annotations and the Revision template's
// annotations, the same fields in both kinds.
type Object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
}

// ServiceOwned names the Knative Service a Configuration belongs to (""
// for one of its own). Knative copies a Service's annotations onto its
// Configuration, so that copy is the Service's policy, judged on the
// Service: on the Configuration it is no policy at all.
func (o Object) ServiceOwned() string {
	if o.Kind != "Configuration" && o.Kind != "" {
		return ""
	}
	return o.Metadata.Labels[serving.ServiceLabelKey]
}

// Subject is the object as ReviewPolicy reads it; kind is given when the
// object's own may be missing (an admission request names it apart).
func (o Object) Subject(kind string) Subject {
	return Subject{Kind: kind, Annotations: o.Metadata.Annotations, TemplateAnnotations: o.Spec.Template.Metadata.Annotations}
}
