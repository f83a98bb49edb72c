package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// AnnotationAnalysisTemplate names a shared analysis document in place
	// of sluice.dev/analysis: "NAME", an AnalysisTemplate in the target's
	// namespace, or "cluster/NAME", a ClusterAnalysisTemplate.
	AnnotationAnalysisTemplate = Prefix + "analysis-template"
	// AnnotationAnalysisArgs gives the template's arguments: "slo=300,team=cart".
	AnnotationAnalysisArgs = Prefix + "analysis-args"
)

// TemplateRef is a target's reference to a shared analysis template.
type TemplateRef struct {
	// Cluster says the template is a ClusterAnalysisTemplate.
	Cluster bool   `json:"cluster,omitempty"`
	Name    string `json:"name"`
	// Args are the target's values for the template's arguments.
	Args map[string]string `json:"args,omitempty"`
	// Version is the template's resource version the rollout read it at.
	Version string `json:"version,omitempty"`
}

// String is the reference as written: NAME or cluster/NAME.
func (r TemplateRef) String() string {
	if r.Cluster {
		return "cluster/" + r.Name
	}
	return r.Name
}

// Kind is the resource kind the reference names.
func (r TemplateRef) Kind() string {
	if r.Cluster {
		return "ClusterAnalysisTemplate"
	}
	return "AnalysisTemplate"
}

// TemplateSpec is a template's spec: its analysis document, in which
// {{args.NAME}} stands for an argument, and the arguments it takes.
type TemplateSpec struct {
	Analysis string        `json:"analysis"`
	Args     []TemplateArg `json:"args,omitempty"`
}

// TemplateArg is one argument of a template; without a value, each target
// must give one.
type TemplateArg struct {
	Name  string  `json:"name"`
	Value *string `json:"value,omitempty"`
}

// parseTemplateRef reads the template reference and its arguments.
func parseTemplateRef(annotations map[string]string, fail func(error)) *TemplateRef {
	raw, ok := annotations[AnnotationAnalysisTemplate]
	args, hasArgs := annotations[AnnotationAnalysisArgs]
	if !ok {
		if hasArgs {
			fail(&FieldError{Key: AnnotationAnalysisArgs, Value: args, Message: "has no template to give them to; name one with " + AnnotationAnalysisTemplate})
		}
		return nil
	}
	if _, both := annotations[AnnotationAnalysis]; both {
		fail(&FieldError{Key: AnnotationAnalysisTemplate, Value: raw, Message: "and " + AnnotationAnalysis + " are both set; keep one: the template, or a document of the target's own"})
		return nil
	}
	ref := &TemplateRef{Name: strings.TrimSpace(raw)}
	if name, found := strings.CutPrefix(ref.Name, "cluster/"); found {
		ref.Cluster, ref.Name = true, name
	}
	if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
		fail(&FieldError{Key: AnnotationAnalysisTemplate, Value: raw,
			Message: "must name an AnalysisTemplate in the target's namespace (NAME) or a ClusterAnalysisTemplate (cluster/NAME): " + strings.Join(errs, "; ")})
		return nil
	}
	for _, part := range SplitList(args) {
		k, v, found := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !found || k == "" {
			fail(&FieldError{Key: AnnotationAnalysisArgs, Value: args, Message: fmt.Sprintf("%q is not name=value, e.g. \"slo=300,team=cart\"", part)})
			return nil
		}
		if ref.Args == nil {
			ref.Args = map[string]string{}
		}
		ref.Args[k] = strings.TrimSpace(v)
	}
	return ref
}

var argRef = regexp.MustCompile(`\{\{\s*args\.([A-Za-z0-9_-]+)\s*\}\}`)

// ApplyTemplate fills a template's {{args.NAME}} from the target's
// arguments (or the template's defaults) and reads the document as
// sluice.dev/analysis would be read. Every mistake names the template.
func ApplyTemplate(ref TemplateRef, spec TemplateSpec, d Defaults) (*Analysis, error) {
	where := fmt.Sprintf("%s %s", ref.Kind(), ref.Name)
	values := map[string]string{}
	var errs []string
	for _, a := range spec.Args {
		switch v, ok := ref.Args[a.Name]; {
		case ok:
			values[a.Name] = v
		case a.Value != nil:
			values[a.Name] = *a.Value
		default:
			errs = append(errs, fmt.Sprintf("argument %s has no value; give it in %s (\"%s=…\")", a.Name, AnnotationAnalysisArgs, a.Name))
		}
	}
	for _, k := range sortedKeys(ref.Args) {
		if !slices.ContainsFunc(spec.Args, func(a TemplateArg) bool { return a.Name == k }) {
			errs = append(errs, fmt.Sprintf("%s takes no argument %s (it takes %s)", where, k, argNames(spec.Args)))
		}
	}
	doc := argRef.ReplaceAllStringFunc(spec.Analysis, func(m string) string {
		name := argRef.FindStringSubmatch(m)[1]
		if v, ok := values[name]; ok {
			return v
		}
		if !slices.ContainsFunc(spec.Args, func(a TemplateArg) bool { return a.Name == name }) {
			errs = append(errs, fmt.Sprintf("%s uses {{args.%s}} but declares no such argument", where, name))
		}
		return m
	})
	if len(errs) > 0 {
		slices.Sort(errs)
		return nil, &FieldError{Key: AnnotationAnalysisTemplate, Value: ref.String(), Message: strings.Join(slices.Compact(errs), "; ")}
	}
	an, err := parseAnalysis(doc, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return an, nil
}

func argNames(args []TemplateArg) string {
	if len(args) == 0 {
		return "none"
	}
	names := make([]string, len(args))
	for i, a := range args {
		names[i] = a.Name
	}
	return strings.Join(names, ", ")
}
