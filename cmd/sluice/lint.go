package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/activities"
	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/worker"
)

func newLintCommand() *cobra.Command {
	var service, namespace, kubeconfig, revision string
	var measure bool
	cmd := &cobra.Command{
		Use:   "lint [FILE...]",
		Short: "Check rollout policies with exactly the worker's rules and messages",
		Long: `Check the sluice.dev/* annotations of Knative Services and Configurations in YAML files
(several documents per file are fine; - reads standard input), or of a live Service with
--service. Defaults come from the same SLUICE_DEFAULT_* settings the worker reads (among them
SLUICE_PROMETHEUS_URL). Exits 1 if any policy is invalid.

With --service and --measure, each check's query also runs once against the policy's Prometheus,
for the Service's latest Revision (or --revision), and prints what it finds: a quick way to see
whether a cluster's Prometheus holds what the checks need before a rollout depends on it.`,
		Example: `  sluice lint service.yaml
  kubectl get ksvc hello -o yaml | sluice lint -
  sluice lint --service hello --service-namespace shop
  sluice lint --service hello --measure`,
		RunE: func(cmd *cobra.Command, args []string) error {
			settings, err := config.LoadSettings(os.LookupEnv)
			if err != nil {
				return err
			}
			var docs []lintDoc
			if service != "" {
				kc, err := worker.KubeConfig(kubeconfig)
				if err != nil {
					return err
				}
				serving, err := worker.ServingClient(kc)
				if err != nil {
					return err
				}
				svc, err := serving.ServingV1().Services(namespace).Get(cmd.Context(), service, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("read Service %s/%s: %w", namespace, service, err)
				}
				docs = append(docs, lintDoc{Kind: "Service", Metadata: lintMeta{Name: svc.Name, Annotations: svc.Annotations}})
				if measure {
					if err := lint(cmd.OutOrStdout(), docs, settings.Defaults); err != nil {
						return err
					}
					return measureChecks(cmd.Context(), cmd.OutOrStdout(), svc, revision, settings.Defaults)
				}
			} else if measure || revision != "" {
				return errors.New("--measure and --revision need --service")
			}
			for _, f := range args {
				d, err := readLintDocs(cmd.InOrStdin(), f)
				if err != nil {
					return err
				}
				docs = append(docs, d...)
			}
			if len(docs) == 0 {
				return errors.New("nothing to lint: name YAML files, - for standard input, or --service NAME")
			}
			return lint(cmd.OutOrStdout(), docs, settings.Defaults)
		},
	}
	cmd.Flags().StringVar(&service, "service", "", "lint a live Knative Service instead of files")
	cmd.Flags().StringVar(&namespace, "service-namespace", "default", "namespace of --service")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --service")
	cmd.Flags().BoolVar(&measure, "measure", false, "with --service: run each check's query once and print what it finds")
	cmd.Flags().StringVar(&revision, "revision", "", "with --measure: the Revision to measure (default: the Service's latest)")
	return cmd
}

type lintMeta struct {
	Name        string            `json:"name"`
	Annotations map[string]string `json:"annotations"`
}

type lintDoc struct {
	Kind     string   `json:"kind"`
	Metadata lintMeta `json:"metadata"`
	source   string
}

func readLintDocs(stdin io.Reader, path string) ([]lintDoc, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []lintDoc
	for i, part := range bytes.Split(b, []byte("\n---")) {
		if len(bytes.TrimSpace(part)) == 0 {
			continue
		}
		var d lintDoc
		if err := yaml.Unmarshal(part, &d); err != nil {
			return nil, fmt.Errorf("%s: document %d is not valid YAML: %w", path, i+1, err)
		}
		if d.Kind != "Service" && d.Kind != "Configuration" {
			continue // other kinds carry no rollout policy
		}
		d.source = path
		out = append(out, d)
	}
	return out, nil
}

// lint prints each policy's verdict; invalid ones make it fail.
func lint(w io.Writer, docs []lintDoc, d config.Defaults) error {
	bad := 0
	for _, doc := range docs {
		name := doc.Kind + " " + doc.Metadata.Name
		if doc.source != "" {
			name += " (" + doc.source + ")"
		}
		opted, err := config.OptedIn(doc.Metadata.Annotations)
		if err == nil && !opted {
			fmt.Fprintf(w, "%s: not opted in (%s: enabled); nothing to check\n", name, config.AnnotationRollout)
			continue
		}
		var p config.Policy
		if err == nil {
			p, err = config.FromAnnotations(doc.Metadata.Annotations, d)
		}
		if err == nil && doc.Kind == "Configuration" && doc.Metadata.Annotations[config.AnnotationRoute] == "" {
			err = fmt.Errorf("%s: a Configuration must name the Route its Revisions roll out on", config.AnnotationRoute)
		}
		if err != nil {
			bad++
			fmt.Fprintf(w, "%s: invalid\n  %s\n", name, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			continue
		}
		fmt.Fprintf(w, "%s: ok: %s\n", name, describePolicy(p))
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d policies are invalid", bad, len(docs))
	}
	return nil
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
	a := &activities.Activities{}
	failed := 0
	for _, c := range p.Analysis.Checks {
		m, _ := a.MeasureCheck(ctx, activities.CheckInput{Check: c, Prometheus: p.Analysis.Prometheus, Vars: vars})
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
