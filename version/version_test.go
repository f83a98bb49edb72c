package version

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAndLine(t *testing.T) {
	for _, c := range []struct {
		in      string
		line    string
		release bool
		bad     bool
	}{
		{in: "v0.1.0", line: "v0.1", release: true},
		{in: "v0.2.0-dev+243a163", line: "v0.2"},
		{in: "v0.2.0-dev+243a163.dirty", line: "v0.2"},
		{in: "v1.4.2-rc.1", line: "v1.4"},
		{in: "0.1.0", bad: true},
		{in: "243a163", bad: true},
		{in: "v0.1", bad: true},
		{in: "", bad: true},
	} {
		_, err := Parse(c.in)
		if (err != nil) != c.bad {
			t.Errorf("Parse(%q): %v, want bad=%v", c.in, err, c.bad)
		}
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
		if got := IsRelease(c.in); got != c.release {
			t.Errorf("IsRelease(%q) = %v, want %v", c.in, got, c.release)
		}
	}
}

func TestIdentityNamesTheBuild(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v0.1.0"
	if got := Identity("worker", 42, "node-a"); got != "42@node-a@sluice-worker/v0.1.0" {
		t.Fatalf("Identity = %q", got)
	}
}

func TestFromIdentity(t *testing.T) {
	for in, want := range map[string][2]string{
		"42@node-a@sluice-worker/v0.1.0":              {"worker", "v0.1.0"},
		"7@pod@sluice-receiver/v0.2.0-dev+243a163c5e": {"receiver", "v0.2.0-dev+243a163c5e"},
		"42@node-a@": {},
		"cli@alice":  {},
	} {
		p, v, ok := FromIdentity(in)
		if ok != (want[0] != "") || p != want[0] || v != want[1] {
			t.Errorf("FromIdentity(%q) = %q, %q, %v; want %v", in, p, v, ok, want)
		}
	}
}

func TestCompatible(t *testing.T) {
	for _, c := range []struct {
		cli, worker string
		ok          bool
	}{
		{"v0.1.0", "v0.1.3", true},
		{"v0.2.0-dev+abc", "v0.1.0", true},
		{"v0.1.0", "v0.2.0", true},
		{"v0.1.0", "v0.3.0", false},
		{"v1.0.0", "v0.9.0", false},
		{"v0.1.0", "243a163", false},
	} {
		if ok, why := Compatible(c.cli, c.worker); ok != c.ok {
			t.Errorf("Compatible(%s, %s) = %v (%s), want %v", c.cli, c.worker, ok, why, c.ok)
		}
	}
}

func TestReadReleases(t *testing.T) {
	rs, err := ReadReleases("..")
	if err != nil || len(rs) == 0 || rs[0].Version != "v0.1.0" || len(rs[0].Commit) != 40 {
		t.Fatalf("the repository's releases: %+v, %v", rs, err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "release"), 0o755); err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		"# none yet\n":             "",
		"v0.1.0\n":                 `release/releases.txt:1: want "vMAJOR.MINOR.PATCH COMMIT", got "v0.1.0"`,
		"# a\nv0.2.0-dev abc123\n": `release/releases.txt:2: want`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "release", "releases.txt"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadReleases(dir)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("ReadReleases(%q): %v, want %q", body, err, want)
		}
	}
}
