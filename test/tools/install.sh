#!/usr/bin/env bash
# Installs the external tools sluice's tests need into a cache directory outside
# the clone, keyed by version, so repeated runs reuse them.
#
#   test/tools/install.sh temporal   # prints the path of the temporal binary
#
# SLUICE_TOOLS_DIR overrides the cache location (default: $XDG_CACHE_HOME/sluice/tools
# or ~/.cache/sluice/tools).
set -euo pipefail

TEMPORAL_CLI_VERSION=v1.5.1
CONFORMANCE_VERSION=v0.4.1 # keep in step with test/tools/conformance/go.mod

cache_root=${SLUICE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/tools}

install_temporal() {
  local dir="$cache_root/temporal-$TEMPORAL_CLI_VERSION"
  local bin="$dir/temporal"
  if [[ ! -x "$bin" ]]; then
    echo "installing Temporal CLI $TEMPORAL_CLI_VERSION into $dir (cold build: about 3 minutes on 2 cores)" >&2
    mkdir -p "$dir.tmp"
    local start=$SECONDS
    GOBIN="$dir.tmp" GOFLAGS=-buildvcs=false go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_CLI_VERSION" >&2
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    echo "Temporal CLI built in $((SECONDS - start))s" >&2
  fi
  echo "$bin"
}

install_conformance() {
  local dir="$cache_root/cloudevents-conformance-$CONFORMANCE_VERSION"
  local bin="$dir/cloudevents"
  if [[ ! -x "$bin" ]]; then
    echo "building the CloudEvents conformance tool $CONFORMANCE_VERSION into $dir (under a minute)" >&2
    mkdir -p "$dir"
    (cd "$(dirname "$0")/conformance" && GOFLAGS=-buildvcs=false go build -o "$bin.tmp" github.com/cloudevents/conformance/cmd/cloudevents)
    mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

case "${1:-}" in
  temporal) install_temporal ;;
  conformance) install_conformance ;;
  *) echo "usage: $0 temporal|conformance" >&2; exit 2 ;;
esac
