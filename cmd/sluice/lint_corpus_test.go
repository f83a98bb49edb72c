package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
)

// corpusCase is one broken or odd policy of testdata/policies.yaml.
type corpusCase struct {
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	Annotations map[string]string `json:"annotations"`
	Template    map[string]string `json:"template"`
	Object      json.RawMessage   `json:"object"`
	Want        []string          `json:"want"`
}

// goInternals are words of Go's decoders and type system that a policy's
// author should never read.
var goInternals = regexp.MustCompile(`Go (value|struct)|unmarshal|config\.|[a-z]Doc\b|json|map\[|\[\]|reflect|\*[a-z]`)

func (c corpusCase) doc(t *testing.T) lintDoc {
	var d lintDoc
	if len(c.Object) > 0 {
		if err := json.Unmarshal(c.Object, &d); err != nil {
			t.Fatalf("%s: object: %v", c.Name, err)
		}
		return d
	}
	d.APIVersion, d.Kind = "serving.knative.dev/v1", c.Kind
	if d.Kind == "" {
		d.Kind = "Service"
	}
	d.Metadata.Name = "corpus"
	d.Metadata.Annotations = c.Annotations
	d.Spec.Template.Metadata.Annotations = c.Template
	return d
}

func loadCorpus(t *testing.T) []corpusCase {
	raw, err := os.ReadFile("testdata/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []corpusCase
	if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestBrokenPolicies runs every case of the corpus through lint's judge
// (the worker's rules plus the kinds and places only lint sees): each gives
// exactly the findings it lists, none passes in silence, none shows Go.
func TestBrokenPolicies(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < 60 {
		t.Fatalf("the corpus has %d cases; keep at least 60", len(cases))
	}
	d := config.BuiltinDefaults()
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if seen[c.Name] {
				t.Fatalf("case name %q is used twice", c.Name)
			}
			seen[c.Name] = true
			r := lintOne(c.doc(t), lintOptions{defaults: d})
			var got []string
			for _, f := range r.Findings {
				got = append(got, string(f.Severity)+" "+f.Key+": "+f.Message)
				if goInternals.MatchString(f.Message) {
					t.Errorf("message shows Go internals: %s", f.Message)
				}
				if f.Key == "" {
					t.Errorf("finding names no annotation or field: %s", f.Message)
				}
			}
			if len(got) == 0 {
				t.Fatalf("passes in silence: verdict %s %s", r.Verdict, r.Plan)
			}
			if os.Getenv("SLUICE_CORPUS_PRINT") != "" {
				b, _ := json.Marshal(got)
				t.Logf("CORPUS %s %s", c.Name, b)
			}
			if strings.Join(got, "\n") != strings.Join(c.Want, "\n") {
				t.Errorf("findings:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.Want, "\n  "))
			}
		})
	}
}
