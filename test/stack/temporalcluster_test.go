package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The production topology's Temporal runs the dynamic configuration
// docs/operations.md gives users, and its static configuration points at it.
func TestTemporalDynamicConfigIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var shown strings.Builder
	for _, line := range strings.SplitAfter(temporalDynamicConfig(true), "\n") {
		if line != "" {
			shown.WriteString("  " + line)
		}
	}
	if !strings.Contains(string(doc), "  ```yaml\n"+shown.String()+"  ```") {
		t.Fatalf("docs/operations.md does not show the dynamic configuration the stack runs:\n%s", temporalDynamicConfig(true))
	}
	var dynamic map[string][]map[string]any
	if err := yaml.Unmarshal([]byte(temporalDynamicConfig(true)), &dynamic); err != nil {
		t.Fatal(err)
	}
	if v := dynamic[eagerActivities]; len(v) != 1 || v[0]["value"] != true {
		t.Fatalf("%s is %v, want one value, true", eagerActivities, v)
	}
	if v := temporalDynamicConfig(false); !strings.Contains(v, "value: false") {
		t.Fatalf("with eager activities off the file says:\n%s", v)
	}
	var static struct {
		DynamicConfigClient struct {
			Filepath string `json:"filepath"`
		} `json:"dynamicConfigClient"`
	}
	ports := map[string][]int{"frontend": {1, 2, 3}, "history": {4, 5}, "matching": {6, 7}, "worker": {8, 9}}
	if err := yaml.Unmarshal([]byte(temporalConfig(10, ports, "/d/dynamic.yaml")), &static); err != nil {
		t.Fatal(err)
	}
	if static.DynamicConfigClient.Filepath != "/d/dynamic.yaml" {
		t.Fatalf("the static configuration reads dynamic configuration from %q", static.DynamicConfigClient.Filepath)
	}
}

// The dev server is given the same setting as a flag, and none when the
// stack runs Temporal at its default.
func TestDevServerDynamicConfig(t *testing.T) {
	if got := strings.Join(devServerDynamicConfig(Options{}), " "); got != "--dynamic-config-value "+eagerActivities+"=true" {
		t.Fatalf("dev server flags: %q", got)
	}
	if got := devServerDynamicConfig(Options{NoEagerActivities: true}); len(got) != 0 {
		t.Fatalf("dev server flags with eager activities off: %q", got)
	}
}
