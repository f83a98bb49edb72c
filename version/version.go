// Package version is the one place sluice's own version lives: stamped at
// build time, read by `sluice version`, the worker's Temporal identity, its
// /metrics, the receiver and the report.
//
// Versions follow semver with a leading v. A release build carries exactly
// the version in the repository's VERSION file (v0.1.0); any other build
// adds the commit it came from as build metadata (v0.2.0-dev+243a163), so a
// worker's identity always says which code it runs.
package version

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Version is set at build time:
//
//	-ldflags "-X github.com/sluicehq/sluice/version.Version=v0.1.0"
//
// A build without it (go run, go test) is "v0.0.0-dev".
var Version = "v0.0.0-dev"

// Parse reads a sluice version: semver with its leading v.
func Parse(v string) (*utilversion.Version, error) {
	if len(v) == 0 || v[0] != 'v' {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH[-pre][+build]", v)
	}
	p, err := utilversion.ParseSemantic(v)
	if err != nil {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH[-pre][+build]: %w", v, err)
	}
	return p, nil
}

// Line is the release line a version belongs to ("v0.1"), the unit of the
// compatibility promise in docs/operations.md; "" when v is not semver.
func Line(v string) string {
	p, err := Parse(v)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("v%d.%d", p.Major(), p.Minor())
}

// IsRelease reports whether v is a release: semver with no pre-release and
// no build metadata, what `make release` stamps.
func IsRelease(v string) bool {
	p, err := Parse(v)
	return err == nil && p.PreRelease() == "" && p.BuildMetadata() == ""
}

// Identity is how a sluice process names itself to Temporal: the SDK's
// default (pid@host@) followed by the program and its version, so the
// Temporal UI's worker list and every task's history say which build ran it.
func Identity(program string, pid int, host string) string {
	return fmt.Sprintf("%d@%s@sluice-%s/%s", pid, host, program, Version)
}

// Go is the Go toolchain and platform the binary was built with.
func Go() string { return fmt.Sprintf("%s, %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH) }

// FromIdentity reads the program and version back from an Identity; ok is
// false for a poller that is not a sluice process of this scheme (an older
// build, or another client).
func FromIdentity(identity string) (program, v string, ok bool) {
	i := strings.LastIndex(identity, "@sluice-")
	if i < 0 {
		return "", "", false
	}
	program, v, ok = strings.Cut(identity[i+len("@sluice-"):], "/")
	return program, v, ok && program != "" && v != ""
}

// Compatible says whether a CLI of version cli may command and read
// rollouts run by a worker of version other, by the promise in
// docs/operations.md: the same major version and release lines at most one
// minor apart (v0.2 talks to v0.1 and v0.3). Development builds are judged
// by the line they lead to.
func Compatible(cli, other string) (bool, string) {
	a, errA := Parse(cli)
	b, errB := Parse(other)
	switch {
	case errA != nil:
		return false, "this CLI's version is not semver: " + errA.Error()
	case errB != nil:
		return false, "the worker's version is not semver: " + errB.Error()
	case a.Major() != b.Major():
		return false, fmt.Sprintf("major versions differ (%s, %s): use a CLI of the worker's major version", Line(cli), Line(other))
	}
	d := int(a.Minor()) - int(b.Minor())
	if d < -1 || d > 1 {
		return false, fmt.Sprintf("release lines %s and %s are more than one minor apart: use a CLI of %s", Line(cli), Line(other), Line(other))
	}
	return true, "compatible"
}

// Release is one line of release/releases.txt: a version and the commit it
// was cut from.
type Release struct {
	Version string
	Commit  string
}

// ReadReleases reads release/releases.txt under root, oldest first ("#"
// starts a comment): the releases every build replays the histories of,
// the last being the one the upgrade test starts from.
func ReadReleases(root string) ([]Release, error) {
	raw, err := os.ReadFile(filepath.Join(root, "release", "releases.txt"))
	if err != nil {
		return nil, fmt.Errorf("read the list of releases: %w", err)
	}
	var out []Release
	for i, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 || !IsRelease(f[0]) {
			return nil, fmt.Errorf("release/releases.txt:%d: want \"vMAJOR.MINOR.PATCH COMMIT\", got %q", i+1, line)
		}
		out = append(out, Release{Version: f[0], Commit: f[1]})
	}
	return out, nil
}
