package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/worker"
)

func newLintCommand(g *globals) *cobra.Command {
	var service, kubeconfig, revision string
	var measure bool
	var stablePods int32
	cmd := withOutput(&cobra.Command{
		Use:   "lint [FILE...]",
		Short: "Check rollout policies with exactly the worker's rules and messages",
		Long: `Check the sluice.dev/* annotations of Knative Services and Configurations in YAML files
(several documents per file; - reads standard input), or of a live Service with --service
(in -n's namespace). Defaults come from the same SLUICE_DEFAULT_* settings the worker reads
(among them SLUICE_PROMETHEUS_URL).

Every document is reported on its own: ok (with the plan the worker would run, capacity
stages included), invalid (errors: the worker refuses the rollout), warnings (settings that
have no effect), not opted in, or skipped (not a Knative Service or Configuration). A
sluice.dev/ key sluice does not know, a policy without its sluice.dev/rollout opt-in, and
sluice annotations written on the Revision template are findings, never silence.

A capacity plan's stages depend on the stable Revision's pods when the rollout starts: lint
shows them for --stable-pods, else for the template's autoscaling.knative.dev/min-scale.

With --service and --measure, each check's query also runs once against the policy's
Prometheus, for the Service's latest Revision (or --revision), and prints what it finds.

Exit codes: 0 every policy is fine; 1 some document has findings (errors or warnings);
2 the input could not be read or parsed (a missing file, broken YAML, an unreachable
cluster).`,
		Example: `  sluice lint service.yaml
  kubectl get ksvc hello -o yaml | sluice lint -
  sluice lint -o json config/*.yaml | jq '.[] | select(.findings)'
  sluice lint --service hello -n shop
  sluice lint --service hello --measure`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(g.output); err != nil {
				return inputErr(err)
			}
			settings, err := settings.LoadSettings(os.LookupEnv)
			if err != nil {
				return inputErr(err)
			}
			opts := lintOptions{defaults: settings.Defaults, stablePods: stablePods, ctx: cmd.Context()}
			var docs []lintDoc
			if service != "" {
				ns := g.kubeNamespace(kubeconfig)
				kc, err := worker.KubeConfig(kubeconfig)
				if err != nil {
					return inputErr(err)
				}
				serving, err := worker.ServingClient(kc)
				if err != nil {
					return inputErr(err)
				}
				svc, err := serving.ServingV1().Services(ns).Get(cmd.Context(), service, metav1.GetOptions{})
				if err != nil {
					return inputErr(fmt.Errorf("read Service %s/%s: %w", ns, service, err))
				}
				tmpl, err := worker.NewTemplates(kc)
				if err != nil {
					return inputErr(err)
				}
				opts.templates = templatesFrom(tmpl)
				var d lintDoc
				d.APIVersion, d.Kind = servingv1.SchemeGroupVersion.String(), "Service"
				d.Metadata.Name, d.Metadata.Namespace, d.Metadata.Annotations = svc.Name, svc.Namespace, svc.Annotations
				d.Spec.Template.Metadata.Annotations = svc.Spec.Template.Annotations
				docs = append(docs, d)
				if measure {
					if err := lint(cmd.OutOrStdout(), g.output, docs, opts); err != nil {
						return err
					}
					return measureChecks(cmd.Context(), cmd.OutOrStdout(), svc, revision, settings.Defaults)
				}
			} else if measure || revision != "" {
				return inputErr(errors.New("--measure and --revision need --service"))
			}
			for _, f := range args {
				d, err := readLintDocs(cmd.InOrStdin(), f)
				if err != nil {
					return inputErr(err)
				}
				docs = append(docs, d...)
			}
			if len(docs) == 0 {
				return inputErr(errors.New("nothing to lint: name YAML files, - for standard input, or --service NAME"))
			}
			if opts.templates == nil {
				opts.templates = templatesIn(docs)
			}
			return lint(cmd.OutOrStdout(), g.output, docs, opts)
		},
	})
	cmd.Flags().StringVar(&service, "service", "", "lint a live Knative Service (in -n's namespace) instead of files")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --service")
	cmd.Flags().BoolVar(&measure, "measure", false, "with --service: run each check's query once and print what it finds")
	cmd.Flags().StringVar(&revision, "revision", "", "with --measure: the Revision to measure (default: the Service's latest)")
	cmd.Flags().Int32Var(&stablePods, "stable-pods", 0, "describe capacity stages for a stable Revision of this many pods (default: the template's min-scale)")
	return withExitCodes(cmd, `  0  every document is fine
  1  some document has findings (errors or warnings)
  2  the input could not be read or parsed`)
}

// lintDoc is one YAML document, read only as far as a policy needs, and
// where it came from.
type lintDoc struct {
	config.Object
	source   string
	document int
	raw      []byte
}

func readLintDocs(stdin io.Reader, path string) ([]lintDoc, error) {
	var r io.Reader = stdin
	name := "standard input"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		defer f.Close()
		r, name = f, path
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []lintDoc
	for i := 1; ; i++ {
		part, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if len(bytes.TrimSpace(stripComments(part))) == 0 {
			i--
			continue
		}
		var d lintDoc
		if err := yaml.Unmarshal(part, &d.Object); err != nil {
			return nil, fmt.Errorf("%s: document %d is not a Kubernetes object in YAML: %s", name, i, yamlProblem(err))
		}
		d.source, d.document, d.raw = path, i, part
		out = append(out, d)
	}
}

// stripComments drops comment lines, so a document of only comments (a
// file's header) is not counted.
func stripComments(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// yamlProblem is a decoding error in the words of YAML, not of the Go
// decoders underneath.
func yamlProblem(err error) string {
	msg := err.Error()
	for _, noise := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: ", "yaml: "} {
		msg = strings.ReplaceAll(msg, noise, "")
	}
	if strings.Contains(msg, "Go ") {
		return "a field has the wrong kind of value (a mapping where text belongs, or the reverse)"
	}
	return msg
}

type lintOptions struct {
	defaults   config.Defaults
	stablePods int32
	// templates finds the analysis templates policies name.
	templates templateSource
	ctx       context.Context
}

// Verdicts of one document.
const (
	verdictOK          = "ok"
	verdictInvalid     = "invalid"
	verdictWarnings    = "warnings"
	verdictNotOptedIn  = "not-opted-in"
	verdictSkipped     = "skipped"
	knativeServingPath = "serving.knative.dev/"
)

// lintResult is one document's verdict, as printed and as -o json gives it.
type lintResult struct {
	Source    string           `json:"source,omitempty"`
	Document  int              `json:"document,omitempty"`
	Kind      string           `json:"kind"`
	Name      string           `json:"name"`
	Namespace string           `json:"namespace,omitempty"`
	Verdict   string           `json:"verdict"`
	Plan      string           `json:"plan,omitempty"`
	Stages    []string         `json:"stages,omitempty"`
	Findings  []config.Finding `json:"findings,omitempty"`
	Note      string           `json:"note,omitempty"`
}

// lint prints each document's verdict; findings make it fail.
func lint(w io.Writer, format string, docs []lintDoc, o lintOptions) error {
	results := make([]lintResult, len(docs))
	failed := 0
	for i, doc := range docs {
		results[i] = lintOne(doc, o)
		if len(results[i].Findings) > 0 {
			failed++
		}
	}
	if err := printAs(w, format, results, func(w io.Writer) {
		for _, r := range results {
			printLintResult(w, r)
		}
	}); err != nil {
		return err
	}
	if failed > 0 {
		return &codedError{code: exitFindings, err: fmt.Errorf("%d of %d documents have findings", failed, len(docs))}
	}
	return nil
}

func printLintResult(w io.Writer, r lintResult) {
	name := r.Kind + " " + r.Name
	if r.Source != "" {
		name += fmt.Sprintf(" (%s, document %d)", r.Source, r.Document)
	}
	switch r.Verdict {
	case verdictOK:
		fmt.Fprintf(w, "%s: ok: %s\n", name, r.Plan)
	case verdictWarnings:
		fmt.Fprintf(w, "%s: ok with warnings: %s\n", name, r.Plan)
	case verdictInvalid:
		fmt.Fprintf(w, "%s: invalid\n", name)
	default:
		fmt.Fprintf(w, "%s: %s\n", name, r.Note)
	}
	for _, s := range r.Stages {
		fmt.Fprintf(w, "  %s\n", s)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(f.String(), "\n", "\n  "))
	}
}

// lintOne judges one document: a Knative Service or Configuration by the
// worker's rules, anything else by whether it carries sluice annotations
// that sluice would never read.
func lintOne(doc lintDoc, o lintOptions) lintResult {
	r := lintResult{Source: doc.source, Document: doc.document, Kind: doc.Kind, Name: doc.Metadata.Name, Namespace: doc.Metadata.Namespace}
	group, _, _ := strings.Cut(doc.APIVersion, "/")
	knativeAPI := doc.APIVersion == "" || group+"/" == knativeServingPath
	policyKind := doc.Kind == "Service" || doc.Kind == "Configuration"
	if doc.APIVersion == "sluice.dev/v1alpha1" && (doc.Kind == "AnalysisTemplate" || doc.Kind == "ClusterAnalysisTemplate") {
		r.Verdict, r.Note = verdictSkipped, "an analysis template: checked with each target here that names it"
		return r
	}
	if !knativeAPI || !policyKind {
		r.Verdict, r.Note = verdictSkipped, "skipped: sluice reads policies from Knative Services and Configurations only"
		if f, ok := wrongKind(doc, knativeAPI); ok {
			r.Verdict, r.Findings = verdictInvalid, []config.Finding{f}
		}
		return r
	}
	if svc := doc.ServiceOwned(); svc != "" {
		r.Verdict, r.Note = verdictSkipped, "skipped: Knative made this Configuration for Service "+svc+", whose policy it copies; lint the Service"
		return r
	}
	rev := config.ReviewPolicy(doc.Subject(doc.Kind), o.defaults)
	if rev.Policy != nil {
		if f := checkTemplate(o.ctx, o.templates, doc.Metadata.Namespace, rev.Policy, o.defaults); f != nil {
			rev.Findings, rev.Policy = append(rev.Findings, *f), nil
		}
	}
	r.Findings = rev.Findings
	switch {
	case rev.Policy != nil:
		r.Verdict, r.Plan = verdictOK, describePolicy(*rev.Policy)
		if len(rev.Findings) > 0 {
			r.Verdict = verdictWarnings
		}
		r.Stages = describeStages(*rev.Policy, doc, o.stablePods)
	case rev.Errors() > 0:
		r.Verdict = verdictInvalid
	default:
		r.Verdict, r.Note = verdictNotOptedIn, fmt.Sprintf("not opted in (%s: enabled); nothing to check", config.AnnotationRollout)
	}
	return r
}

// wrongKind is the finding for a document that is not a policy's kind but
// was meant to be: a kind in the wrong case, a Kubernetes Service, a Route
// or Revision carrying a policy.
func wrongKind(doc lintDoc, knativeAPI bool) (config.Finding, bool) {
	var sluiceKeys []string
	for k := range doc.Metadata.Annotations {
		if strings.HasPrefix(k, config.Prefix) && !config.WrittenBySluice(k) && k != config.AnnotationRelease {
			sluiceKeys = append(sluiceKeys, k)
		}
	}
	slices.Sort(sluiceKeys)
	for _, want := range []string{"Service", "Configuration"} {
		if strings.EqualFold(doc.Kind, want) && doc.Kind != want && knativeAPI {
			return config.Finding{Key: "kind", Severity: config.SeverityError, Value: doc.Kind,
				Message: fmt.Sprintf("is not a Kubernetes kind: kinds are case-sensitive; write kind: %s", want)}, true
		}
	}
	if len(sluiceKeys) == 0 {
		return config.Finding{}, false
	}
	keys := strings.Join(sluiceKeys, ", ")
	if doc.Kind == "Service" && !knativeAPI {
		return config.Finding{Key: "apiVersion", Severity: config.SeverityError, Value: doc.APIVersion, Message: fmt.Sprintf(
			"this is a Kubernetes Service, not a Knative one, so sluice never reads %s; use apiVersion: serving.knative.dev/v1", keys)}, true
	}
	return config.Finding{Key: "kind", Severity: config.SeverityError, Value: doc.Kind, Message: fmt.Sprintf(
		"sluice reads %s only from a Knative Service, or a Configuration rolled out on a Route; move them there", keys)}, true
}
