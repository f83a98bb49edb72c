#!/usr/bin/env bash
# Builds everything a sluice release ships (make release), without a Docker
# engine or a registry:
#
#   release/build.sh [OUT]       (OUT defaults to dist)
#
# Writes into OUT
#   oci/                     the multi-platform image (linux/amd64, linux/arm64), an OCI layout
#   sbom/                    its SPDX SBOMs, one per platform and one for the index
#   sluice.yaml              config/deploy, every image resolved to $KO_DOCKER_REPO/sluice@sha256:…
#   sluice-linux-<arch>.tar  the host platform's image, for docker/podman load or kind
#   sluice-<os>-<arch>       the CLI (and worker, receiver) for linux and darwin on amd64 and arm64
#   sluice-<version>.tgz     the Helm chart, its image pinned to the digest above
#   SHA256SUMS               the checksums of all of the above but oci/
#
# The version is the VERSION file's, and the tree must be clean
# (release/version.sh --release), unless SLUICE_VERSION names one.
# KO_DOCKER_REPO is the repository the images will be pushed to (default
# ghcr.io/sluicehq, which the chart names by default); BINARIES narrows the
# os/arch list. Every output is reproducible: the same commit gives the same
# bytes, and so the same image digests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=${SLUICE_VERSION:-$(bash "$root/release/version.sh" --release)}
export KO_DOCKER_REPO=${KO_DOCKER_REPO:-ghcr.io/sluicehq}
binaries=${BINARIES:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
helm=$(bash "$root/test/tools/install.sh" helm)

rm -rf "$out/sbom" "$out"/sluice-* "$out/SHA256SUMS"

# Images, the resolved manifests and the SBOMs.
SLUICE_VERSION=$version SBOM_DIR=$out/sbom bash "$root/images/build.sh" "$out"
digest=$(sed -nE "s|^\s*image: $KO_DOCKER_REPO/sluice@(sha256:[0-9a-f]{64})$|\1|p" "$out/sluice.yaml" | sort -u)
if [[ $(wc -l <<<"$digest") -ne 1 || -z $digest ]]; then
  echo "release: $out/sluice.yaml does not name one image by digest: $digest" >&2
  exit 1
fi

# The binaries: static, without local paths, stamped with the version.
cd "$root"
for target in $binaries; do
  os=${target%/*} arch=${target#*/}
  echo "building sluice $version for $os/$arch" >&2
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X github.com/sluicehq/sluice/version.Version=$version" \
    -o "$out/sluice-$os-$arch" ./cmd/sluice
done

# The chart, its version the release's and its image the one just built.
chart=$(mktemp -d)
trap 'rm -rf "$chart"' EXIT
cp -R "$root/charts/sluice" "$chart/"
values=$chart/sluice/values.yaml
sed -i -E "s|^  repository: .*|  repository: $KO_DOCKER_REPO/sluice|; s|^  digest: \"\"|  digest: \"$digest\"|" "$values"
grep -q "digest: \"$digest\"" "$values" || { echo "release: could not pin the chart's image digest" >&2; exit 1; }
"$helm" lint --strict "$chart/sluice" >/dev/null
# Helm stamps each file of the package with its modification time: the
# commit's, so that the package too is the same for the same commit.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
find "$chart/sluice" -exec touch -h -d "@$epoch" {} +
"$helm" package "$chart/sluice" --version "${version#v}" --app-version "$version" --destination "$out" >&2

cd "$out"
sha256sum sluice.yaml sluice-* sbom/* >SHA256SUMS
echo "release $version in $out: image $KO_DOCKER_REPO/sluice@$digest" >&2
