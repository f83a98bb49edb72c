package main

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// printAs writes v as JSON or YAML, or with text for -o text.
func printAs(w io.Writer, format string, v any, text func(io.Writer)) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	text(w)
	return nil
}

func validateOutput(o string) error {
	if o != "text" && o != "json" && o != "yaml" {
		return fmt.Errorf("--output %q: use text, json or yaml", o)
	}
	return nil
}
