#!/usr/bin/env bash
# Prints the version a build of this tree carries: the VERSION file's, with
# the commit as semver build metadata (v0.1.0+243a163c5e1f, .dirty when the
# tree has changes). `release/version.sh --release` prints the VERSION file's
# alone, and fails unless the tree is clean: what `make release` stamps.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
v=$(tr -d '[:space:]' <"$root/VERSION")
if [[ ! $v =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "VERSION: $v is not semver (vMAJOR.MINOR.PATCH[-pre])" >&2
  exit 1
fi
dirty=
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  sha=$(git -C "$root" rev-parse --short=12 HEAD)
  git -C "$root" diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
else
  sha=unknown
fi
if [[ ${1:-} == --release ]]; then
  if [[ -n $dirty ]]; then
    echo "release: the tree has uncommitted changes; a release is built from a commit" >&2
    exit 1
  fi
  echo "$v"
  exit 0
fi
echo "$v+$sha$dirty"
