package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
)

// The docs test: every `sluice …` command line in README.md and docs/ must
// parse with the CLI as it is (verb, flags, and in code blocks the number of
// arguments), and every policy example must pass lint without a finding, so
// an example that no longer works fails CI.

// expectFindings, in the line before a code block, marks a policy example
// that shows a mistake on purpose.
const expectFindings = "<!-- sluice lint: findings -->"

type docBlock struct {
	file, lang, text string
	line             int
	expectFindings   bool
}

func docFiles(t *testing.T) []string {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	return append([]string{"../../README.md"}, files...)
}

var fence = regexp.MustCompile("^\\s*```\\s*([a-z]*)\\s*$")

// blocks splits a Markdown file into its fenced code blocks and its prose.
func blocks(t *testing.T, file string) (code []docBlock, prose []docBlock) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			prose = append(prose, docBlock{file: file, line: i + 1, text: lines[i]})
			continue
		}
		b := docBlock{file: file, lang: m[1], line: i + 1, expectFindings: i > 0 && strings.TrimSpace(lines[i-1]) == expectFindings}
		var body []string
		for i++; i < len(lines) && !fence.MatchString(lines[i]); i++ {
			body = append(body, lines[i])
		}
		b.text = strings.Join(body, "\n")
		code = append(code, b)
	}
	return code, prose
}

// invocation finds `sluice …` (or `kn sluice …`, `bin/sluice …`) in a
// line and returns its words up to a pipe, redirect, comment or `&&`.
var invocation = regexp.MustCompile(`(?:^|[\s|;&(])(?:\./)?(?:bin/)?(?:kn )?sluice( [^|;&>#` + "`" + `]*)`)

// words splits a command line as a shell would, for the quoting the docs use.
func words(s string) []string {
	var out []string
	var cur strings.Builder
	quote, in := rune(0), false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// expand turns a placeholder like status|promote|pause into each choice.
func expand(args []string) [][]string {
	out := [][]string{nil}
	for _, a := range args {
		choices := []string{a}
		if strings.Contains(a, "|") && !strings.ContainsAny(a, "{}") {
			choices = strings.Split(a, "|")
		}
		var next [][]string
		for _, prefix := range out {
			for _, c := range choices {
				next = append(next, append(append([]string(nil), prefix...), c))
			}
		}
		out = next
	}
	return out
}

// parseLine parses one documented command line without running it; full
// also checks the number of arguments and required flags (code blocks show
// whole commands, prose often names a verb alone).
func parseLine(args []string, full bool) error {
	root := newRoot(false)
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if !cmd.Runnable() {
		if len(rest) > 0 {
			return &codedError{code: 1, err: errUnknown(cmd.CommandPath(), rest[0])}
		}
		return nil
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if !full {
		return nil
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return err
	}
	return cmd.ValidateRequiredFlags()
}

type unknownVerb struct{ path, word string }

func (e unknownVerb) Error() string { return e.path + " has no verb " + e.word }
func errUnknown(path, word string) error {
	return unknownVerb{path, word}
}

func TestDocsCommandLinesParse(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		code, prose := blocks(t, file)
		check := func(b docBlock, line string, full bool) {
			for _, m := range invocation.FindAllStringSubmatchIndex(line, -1) {
				if helmRelease.MatchString(line[:m[2]]) {
					continue // "helm install sluice …": the release's name, not the CLI
				}
				args := words(line[m[2]:m[3]])
				if len(args) == 0 {
					continue
				}
				for _, choice := range expand(args) {
					checked++
					if err := parseLine(choice, full); err != nil {
						t.Errorf("%s:%d: sluice %s: %v", b.file, b.line, strings.Join(choice, " "), err)
					}
				}
			}
		}
		for _, b := range code {
			shell := b.lang == "sh" || b.lang == "bash" || b.lang == "console" || b.lang == "shell"
			if b.lang != "" && !shell {
				continue
			}
			for i, line := range strings.Split(b.text, "\n") {
				line = strings.TrimPrefix(strings.TrimSpace(line), "$ ")
				if !shell && !strings.HasPrefix(line, "sluice ") && !strings.HasPrefix(line, "kn sluice ") {
					continue // an untagged block is output or a listing, unless a line starts with the command
				}
				check(docBlock{file: b.file, line: b.line + 1 + i}, line, true)
			}
		}
		for _, b := range prose {
			for _, span := range inlineCode.FindAllStringSubmatch(b.text, -1) {
				check(b, span[1], false)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d command lines found in the docs; is the extraction broken?", checked)
	}
	t.Logf("%d documented command lines parse", checked)
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// helmRelease ends the text before "sluice" when sluice is a Helm
// release's name: helm install sluice charts/sluice.
var helmRelease = regexp.MustCompile(`\bhelm\s+(install|upgrade|uninstall|template|status|rollback|get\s+\w+)\s+sluice$`)

// annotationKey finds a sluice.dev/ annotation key in a YAML example (not
// the API group of sluice's Rollout resource, sluice.dev/v1alpha1).
var annotationKey = regexp.MustCompile(`sluice\.dev/[a-z][a-z-]*"?\s*:`)

// TestDocsPolicyExamplesLint runs every YAML example that carries a sluice
// annotation through lint: a whole object as it is, a fragment of
// annotations as a Service's, a fragment of an analysis or wave document as
// that annotation's value.
func TestDocsPolicyExamplesLint(t *testing.T) {
	d := config.BuiltinDefaults()
	d.PrometheusURL = "http://prometheus.monitoring:9090" // as a cluster's worker has it
	checked := 0
	for _, file := range docFiles(t) {
		code, _ := blocks(t, file)
		for _, b := range code {
			if b.lang != "yaml" || !(annotationKey.MatchString(b.text) || strings.Contains(b.text, "checks:") || strings.HasPrefix(strings.TrimSpace(b.text), "waves:")) {
				continue
			}
			docs, err := exampleDocs(b)
			if err != nil {
				t.Errorf("%s:%d: %v", b.file, b.line, err)
				continue
			}
			var findings []string
			for _, doc := range docs {
				r := lintOne(doc, lintOptions{defaults: d})
				for _, f := range r.Findings {
					findings = append(findings, f.String())
				}
				if r.Verdict != verdictSkipped {
					checked++
				}
			}
			switch {
			case b.expectFindings && len(findings) == 0:
				t.Errorf("%s:%d: the example is marked as a mistake, but lint finds nothing", b.file, b.line)
			case !b.expectFindings && len(findings) > 0:
				t.Errorf("%s:%d: the example does not pass lint:\n  %s", b.file, b.line, strings.Join(findings, "\n  "))
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d policy examples found in the docs; is the extraction broken?", checked)
	}
	t.Logf("%d documented policy examples pass lint", checked)
}

// exampleDocs reads a YAML example as the objects lint judges.
func exampleDocs(b docBlock) ([]lintDoc, error) {
	if strings.Contains(b.text, "kind:") && strings.Contains(b.text, "apiVersion:") {
		return readLintDocs(strings.NewReader(b.text), "-")
	}
	text := dedent(b.text)
	var top map[string]any
	if err := yaml.Unmarshal([]byte(text), &top); err != nil {
		return nil, err
	}
	if top["metadata"] != nil {
		var d lintDoc
		if err := yaml.Unmarshal([]byte(text), &d); err != nil {
			return nil, err
		}
		d.APIVersion, d.Kind, d.Metadata.Name = "serving.knative.dev/v1", "Service", "example"
		return []lintDoc{d}, nil
	}
	annotations := map[string]string{}
	switch {
	case top["checks"] != nil || top["webhooks"] != nil:
		annotations[config.AnnotationAnalysis] = text
	case top["waves"] != nil:
		annotations[config.AnnotationWaves] = text
	default:
		if err := yaml.Unmarshal([]byte(text), &annotations); err != nil {
			return nil, err
		}
	}
	if _, set := annotations[config.AnnotationRollout]; !set {
		annotations[config.AnnotationRollout] = "enabled"
	}
	var d lintDoc
	d.APIVersion, d.Kind, d.Metadata.Name, d.Metadata.Annotations = "serving.knative.dev/v1", "Service", "example", annotations
	return []lintDoc{d}, nil
}

// dedent removes the indent every line of a fragment shares.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}
