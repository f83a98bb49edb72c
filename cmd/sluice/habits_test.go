package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every verb's --help shows an example and its exit codes, as kubectl's and
// kn's do.
func TestEveryVerbHasExampleAndExitCodes(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		if !cmd.Runnable() || cmd.Hidden || strings.HasPrefix(cmd.CommandPath(), "sluice completion") || cmd.Name() == "help" {
			return
		}
		var out bytes.Buffer
		cmd.SetOut(&out)
		if err := cmd.Help(); err != nil {
			t.Fatal(err)
		}
		help := out.String()
		if !strings.Contains(help, "Examples:\n") || !strings.Contains(help, "Exit codes:\n  0  ") {
			t.Errorf("%s --help has no example or no exit codes:\n%s", cmd.CommandPath(), help)
		}
		for _, line := range strings.Split(cmd.Example, "\n") {
			if !strings.Contains(line, "sluice "+strings.TrimPrefix(cmd.CommandPath(), "sluice ")) && !strings.Contains(line, "sluice") {
				t.Errorf("%s: example %q does not run sluice", cmd.CommandPath(), line)
			}
		}
	}
	walk(newRoot(false))
}

func TestKnPluginUsageSaysKnSluice(t *testing.T) {
	root := newRoot(true)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"promote", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  kn sluice promote TARGET [flags]") || !strings.Contains(out.String(), "  kn sluice promote hello\n") {
		t.Fatalf("kn sluice promote --help:\n%s", out.String())
	}
}

func TestOutputRefusedWhereNotSupported(t *testing.T) {
	for args, wantErr := range map[string]string{
		"promote hello -o json":          "-o/--output is not supported by sluice promote",
		"abort hello --reason x -o yaml": "-o/--output is not supported by sluice abort",
		"wave promote hello -o json":     "-o/--output is not supported by sluice wave promote",
	} {
		root := newRoot(false)
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(strings.Fields(args))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("sluice %s: %v, want %q", args, err, wantErr)
		}
	}
}
