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
KUBERNETES_VERSION=v1.36.3 # test/tools/kube/go.mod
ETCD_VERSION=v3.6.8        # test/tools/etcd/go.mod
EVENTING_VERSION=v0.50.0   # test/tools/eventing/go.mod
SERVING_VERSION=v0.50.0    # test/tools/serving/go.mod
KWOK_VERSION=v0.8.0        # test/tools/kwok/go.mod
KO_VERSION=v0.19.1         # images/go.mod
FLAGGER_VERSION=v1.44.0    # test/tools/flagger/go.mod (make bench-peers only)
PROMETHEUS_VERSION=v0.316.0 # test/tools/prometheus/go.mod (the module's version of Prometheus 3.16.0)
HELM_VERSION=v4.3.2        # test/tools/helm/go.mod
TEMPORAL_SERVER_VERSION=v1.29.1 # test/tools/temporalserver/go.mod: the server the dev server embeds
TEMPORAL_UI_VERSION=v2.42.1     # test/tools/temporalui/go.mod: the UI the dev server embeds

cache_root=${SLUICE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/tools}

install_temporal() {
  local dir="$cache_root/temporal-$TEMPORAL_CLI_VERSION"
  local bin="$dir/temporal"
  if [[ ! -x "$bin" ]]; then
    echo "installing Temporal CLI $TEMPORAL_CLI_VERSION into $dir (cold build: about 7 minutes on 2 cores)" >&2
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

# build_in_module builds packages of a tools module into a versioned cache
# directory; it prints the directory.
build_in_module() {
  local module=$1 dir=$2 note=$3
  shift 3
  local missing=0
  for pkg in "$@"; do
    [[ -x "$dir/$(basename "$pkg")" ]] || missing=1
  done
  if [[ $missing == 1 ]]; then
    echo "building $note into $dir" >&2
    mkdir -p "$dir.tmp"
    local start=$SECONDS
    (cd "$(dirname "$0")/$module" && GOFLAGS=-buildvcs=false go build -tags "${BUILD_TAGS:-}" -ldflags "${BUILD_LDFLAGS:-}" -o "$dir.tmp/" "$@") >&2
    mkdir -p "$dir"
    mv "$dir.tmp"/* "$dir/"
    rmdir "$dir.tmp"
    echo "built $note in $((SECONDS - start))s" >&2
  fi
  echo "$dir"
}

# install_kube builds the Kubernetes binaries with their version linked in:
# without it kube-apiserver reports v0.0.0-master+$Format:%H$, which Knative's
# binaries refuse at start ("Version check failed").
install_kube() {
  local minor=${KUBERNETES_VERSION#v1.}
  minor=${minor%%.*}
  BUILD_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    build_in_module kube "$cache_root/kubernetes-$KUBERNETES_VERSION-versioned" \
    "kube-apiserver, kube-controller-manager, kube-scheduler and kubectl $KUBERNETES_VERSION (cold build: about 12 to 16 minutes on 2 cores)" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
}

# install_serving builds Knative Serving's own components, unmodified.
install_serving() {
  build_in_module serving "$cache_root/knative-serving-$SERVING_VERSION" \
    "Knative Serving's controller, webhook, autoscaler and queue-proxy $SERVING_VERSION (about 4 minutes cold)" \
    knative.dev/serving/cmd/controller knative.dev/serving/cmd/webhook \
    knative.dev/serving/cmd/autoscaler knative.dev/serving/cmd/queue
}

# install_kwok builds kwok, which runs the stack's fake nodes.
install_kwok() {
  build_in_module kwok "$cache_root/kwok-$KWOK_VERSION" "kwok $KWOK_VERSION (about 3 minutes cold)" sigs.k8s.io/kwok/cmd/kwok
}

# install_flagger builds Flagger, measured beside sluice by make bench-peers
# (not by make test). It prints the binary.
install_flagger() {
  local dir
  dir=$(build_in_module flagger "$cache_root/flagger-$FLAGGER_VERSION" "Flagger $FLAGGER_VERSION (a few minutes cold)" \
    github.com/fluxcd/flagger/cmd/flagger) || return
  echo "$dir/flagger"
}

install_etcd() {
  local dir
  dir="$cache_root/etcd-$ETCD_VERSION"
  [[ -x "$dir/etcd" ]] || dir=$(build_in_module etcd "$dir" "etcd $ETCD_VERSION (about a minute)" go.etcd.io/etcd/server/v3)
  # go build names the binary after the package path ("server").
  [[ -x "$dir/etcd" ]] || cp "$dir/server" "$dir/etcd"
  echo "$dir"
}

install_eventing() {
  build_in_module eventing "$cache_root/knative-eventing-$EVENTING_VERSION" \
    "Knative Eventing's ApiServerSource adapter $EVENTING_VERSION (a few minutes)" \
    knative.dev/eventing/cmd/apiserver_receive_adapter
}

# install_ko builds ko, which builds sluice's images (make images), from the
# images module, so its version is pinned with go.sum.
install_ko() {
  local dir="$cache_root/ko-$KO_VERSION"
  if [[ ! -x "$dir/ko" ]]; then
    echo "building ko $KO_VERSION into $dir (a minute or two)" >&2
    mkdir -p "$dir"
    (cd "$(dirname "$0")/../../images" && GOFLAGS=-buildvcs=false go build -o "$dir/ko.tmp" github.com/google/ko) >&2
    mv "$dir/ko.tmp" "$dir/ko"
  fi
  echo "$dir/ko"
}

# install_helm builds Helm, which packages sluice's chart (make release) and
# which the chart test drives. It prints the binary.
install_helm() {
  local dir
  # Without its version linked in, helm calls itself "v4.3".
  dir=$(BUILD_LDFLAGS="-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" build_in_module helm "$cache_root/helm-$HELM_VERSION" "Helm $HELM_VERSION (about 3 minutes cold)" \
    helm.sh/helm/v4/cmd/helm) || return
  echo "$dir/helm"
}

# apt_install installs a Debian package that provides command $1 unless it
# is there already, and prints the command's path.
apt_install() {
  local cmd=$1 why=$2
  shift 2
  if ! command -v "$cmd" >/dev/null 2>&1; then
    echo "installing Debian's $cmd for $why (a minute or two)" >&2
    if [[ $(id -u) -ne 0 ]]; then
      echo "installing $cmd needs root (apt-get); install the $1 package and retry" >&2
      return 1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@") >&2
  fi
  command -v "$cmd"
}

# install_browser installs Debian's Chromium for the Temporal UI test.
install_browser() { apt_install chromium "the UI test" chromium fonts-dejavu-core; }

# install_prometheus builds the Prometheus server the stack scrapes Knative's
# queue-proxies with. Debian's prometheus package lacks Kubernetes service
# discovery, which is how a cluster's Prometheus finds them; the build keeps
# that discovery only. It prints the binary.
install_prometheus() {
  local dir
  dir=$(BUILD_TAGS=remove_all_sd,enable_kubernetes_sd build_in_module prometheus "$cache_root/prometheus-$PROMETHEUS_VERSION" \
    "Prometheus $PROMETHEUS_VERSION with Kubernetes service discovery (about 5 minutes cold)" \
    github.com/prometheus/prometheus/cmd/prometheus) || return
  echo "$dir/prometheus"
}

# install_temporal_server builds Temporal's server and its SQL schema tool,
# for the stack's production-shaped Temporal (SLUICE_TEMPORAL=cluster): the
# frontend, history, matching and worker services as separate processes on
# PostgreSQL. It prints the directory holding server and sql.
install_temporal_server() {
  build_in_module temporalserver "$cache_root/temporal-server-$TEMPORAL_SERVER_VERSION" \
    "Temporal's server and SQL tool $TEMPORAL_SERVER_VERSION (about 2 minutes after the Temporal CLI, 6 cold)" \
    go.temporal.io/server/cmd/server go.temporal.io/server/cmd/tools/sql
}

# install_temporal_ui builds Temporal's web UI server, which the stack runs
# beside the production-shaped Temporal. It prints the binary.
install_temporal_ui() {
  local dir
  dir=$(build_in_module temporalui "$cache_root/temporal-ui-server-$TEMPORAL_UI_VERSION" \
    "Temporal's UI server $TEMPORAL_UI_VERSION (under a minute after the Temporal CLI)" \
    github.com/temporalio/ui-server/v2/cmd/server) || return
  echo "$dir/server"
}

# install_postgres finds Debian's PostgreSQL server, installing it with
# apt-get if it is missing, and prints the directory of its programs
# (postgres, initdb, pg_ctl): the production-shaped Temporal's database.
install_postgres() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [[ -z $dir || ! -x $dir/postgres ]]; then
    if [[ $(id -u) -ne 0 ]]; then
      echo "PostgreSQL is missing and installing it needs root (apt-get install postgresql)" >&2
      return 1
    fi
    echo "installing Debian's PostgreSQL for the production-shaped Temporal (a minute or two)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql) >&2
    dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$dir"
}

# install_previous builds sluice's previous release — the last line of
# release/releases.txt — from this repository's own history, into the cache
# keyed by its commit; it prints the binary's path, or nothing when no
# release has been cut yet.
install_previous() {
  local root line ver commit dir bin
  root=$(cd "$(dirname "$0")/../.." && pwd)
  line=$(grep -vE '^\s*(#|$)' "$root/release/releases.txt" | tail -n 1 || true)
  [[ -z $line ]] && return 0
  read -r ver commit <<<"$line"
  dir="$cache_root/sluice-$ver-${commit:0:12}"
  bin="$dir/sluice"
  if [[ ! -x "$bin" ]]; then
    if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
      echo "release/releases.txt names $ver at commit $commit, which this clone does not have (a shallow clone? git fetch --unshallow)" >&2
      return 1
    fi
    echo "building sluice $ver from commit $commit into $dir (about a minute)" >&2
    rm -rf "$dir.src" && mkdir -p "$dir.src" "$dir"
    git -C "$root" archive "$commit" | tar -x -C "$dir.src"
    (cd "$dir.src" && GOFLAGS=-buildvcs=false go build -ldflags "-X github.com/sluicehq/sluice/version.Version=$ver" -o "$bin.tmp" ./cmd/sluice) >&2
    mv "$bin.tmp" "$bin"
    rm -rf "$dir.src"
  fi
  echo "$bin"
}

case "${1:-}" in
  temporal) install_temporal ;;
  prometheus) install_prometheus ;;
  browser) install_browser ;;
  conformance) install_conformance ;;
  kube) install_kube ;;
  etcd) install_etcd ;;
  eventing) install_eventing ;;
  serving) install_serving ;;
  kwok) install_kwok ;;
  ko) install_ko ;;
  helm) install_helm ;;
  flagger) install_flagger ;;
  previous) install_previous ;;
  temporal-server) install_temporal_server ;;
  temporal-ui) install_temporal_ui ;;
  postgres) install_postgres ;;
  all)
    # Prints one line per tool, "export NAME=PATH", for the tests' and the
    # local stack's environment.
    temporal=$(install_temporal)
    conformance=$(install_conformance)
    kube=$(install_kube)
    etcd=$(install_etcd)
    eventing=$(install_eventing)
    serving=$(install_serving)
    kwok=$(install_kwok)
    browser=$(install_browser)
    ko=$(install_ko)
    helm=$(install_helm)
    prometheus=$(install_prometheus)
    temporalserver=$(install_temporal_server)
    temporalui=$(install_temporal_ui)
    postgres=$(install_postgres)
    # ip netns, for the components that run in network namespaces.
    apt_install ip "network namespaces in the Knative tests" iproute2 >/dev/null
    echo "export SLUICE_TEMPORAL_BIN=$temporal"
    echo "export SLUICE_CLOUDEVENTS_BIN=$conformance"
    echo "export SLUICE_KUBE_DIR=$kube"
    echo "export SLUICE_ETCD_DIR=$etcd"
    echo "export SLUICE_EVENTING_DIR=$eventing"
    echo "export SLUICE_SERVING_DIR=$serving"
    echo "export SLUICE_KWOK_DIR=$kwok"
    echo "export SLUICE_CHROMIUM_BIN=$browser"
    echo "export SLUICE_KO_BIN=$ko"
    echo "export SLUICE_HELM_BIN=$helm"
    echo "export SLUICE_PROMETHEUS_BIN=$prometheus"
    echo "export SLUICE_TEMPORAL_SERVER_DIR=$temporalserver"
    echo "export SLUICE_TEMPORAL_UI_SERVER=$temporalui"
    echo "export SLUICE_POSTGRES_DIR=$postgres"
    ;;
  *) echo "usage: $0 temporal|conformance|kube|etcd|eventing|serving|kwok|browser|ko|helm|prometheus|flagger|previous|temporal-server|temporal-ui|postgres|all" >&2; exit 2 ;;
esac
