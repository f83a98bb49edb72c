#!/usr/bin/env bash
# Builds sluice's container images with ko: no Docker engine, no registry.
#
#   images/build.sh [OUT]        (make images; OUT defaults to dist)
#
# Writes
#   OUT/oci/          an OCI image layout: the multi-platform image of sluice
#   OUT/sluice.yaml   config/deploy with every ko:// path resolved to
#                     $KO_DOCKER_REPO/sluice@sha256:<digest of that image>
#   OUT/sluice-linux-<arch>.tar   the host platform's image as a tarball
#                     (docker load, podman load, kind load image-archive)
#
# KO_DOCKER_REPO is the repository the images will be pushed to (default
# localhost:5000); PLATFORMS the list to build (default from .ko.yaml:
# linux/amd64,linux/arm64); SLUICE_VERSION the version stamped in the binary;
# SBOM_DIR, if set, where ko writes the images' SPDX SBOMs (make release).
# KO_PUSH=true also pushes the images to KO_DOCKER_REPO (with your registry
# credentials, as ko finds them in ~/.docker/config.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)

ko=$(bash "$root/test/tools/install.sh" ko)
# ko keeps base images (and nothing else) in $KOCACHE/img; sluice's base goes
# there so ko finds it by digest and never asks a registry.
export KOCACHE=${KOCACHE:-$(dirname "$ko")/cache}
platforms=${PLATFORMS:-linux/amd64,linux/arm64}
base_digest=$(cd "$root/images" && go run ./base -layout "$KOCACHE/img" -platforms "$platforms")
export KO_DEFAULTBASEIMAGE=base.sluice.invalid/static@$base_digest
export KO_DOCKER_REPO=${KO_DOCKER_REPO:-localhost:5000}
export SLUICE_VERSION=${SLUICE_VERSION:-$(bash "$root/release/version.sh")}
echo "base image, written locally (CA bundle, user 65532): KOCACHE=$KOCACHE KO_DEFAULTBASEIMAGE=$KO_DEFAULTBASEIMAGE" >&2

cd "$root"
# ko names the layout's image by the layout's path, which must be a valid
# repository name (lower case): build it at a relative path, then move it.
scratch=.images-oci
rm -rf "$scratch" "$out/oci"
files=()
for f in config/deploy/[0-9]*.yaml; do files+=(-f "$f"); done
sbom=()
[[ -n ${SBOM_DIR:-} ]] && sbom=(--sbom spdx --sbom-dir "$SBOM_DIR")
"$ko" resolve --push="${KO_PUSH:-false}" --base-import-paths --platform "$platforms" "${sbom[@]}" \
  --oci-layout-path "$scratch" "${files[@]}" >"$out/sluice.yaml.tmp"
mv "$scratch" "$out/oci"
# Name the image by the repository it will be pushed to, keeping the digest.
sed "s|image: $scratch@sha256:|image: $KO_DOCKER_REPO/sluice@sha256:|" "$out/sluice.yaml.tmp" >"$out/sluice.yaml"
rm "$out/sluice.yaml.tmp"

arch=$(go env GOARCH)
if [[ ,$platforms, == *,linux/$arch,* ]]; then
  "$ko" build --push=false --base-import-paths --platform "linux/$arch" \
    --tarball "$out/sluice-linux-$arch.tar" ./cmd/sluice >/dev/null
fi
echo "images: $out/oci, $out/sluice.yaml${arch:+, $out/sluice-linux-$arch.tar}" >&2
