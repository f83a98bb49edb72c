// Package images tests `make release` and so `make images`: the images ko builds from a locally
// written base, without a Docker engine or a registry.
package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/test/stack"
)

const (
	repo    = "registry.test.invalid/platform"
	version = "v9.8.7-images-test"
	// maxCompressed bounds one platform's image as pulled. The binary holds
	// the Temporal SDK, Knative's clientsets and the CloudEvents SDK; the
	// base adds a CA bundle.
	maxCompressed = 30 << 20
)

// TestMakeRelease runs release/build.sh (what `make release` runs) twice
// and checks what a cluster and a laptop will run. The image: one
// multi-platform image, non-root by number, no shell, small, carrying a
// sluice binary that runs and reports the version it was built as, with an
// SBOM per platform; the resolved manifests and the packaged chart name
// exactly that image by digest; the host platform's tarball is the same
// image. The binaries: static, for each os/arch, the host's runs. SHA256SUMS
// holds every file. And the second build of the same commit gives the same
// digests, byte for byte.
func TestMakeRelease(t *testing.T) {
	if os.Getenv("SLUICE_KO_BIN") == "" || os.Getenv("SLUICE_HELM_BIN") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("SLUICE_KO_BIN or SLUICE_HELM_BIN is not set: run the tests with `make test`, which builds ko and Helm")
		}
		t.Skip("SLUICE_KO_BIN or SLUICE_HELM_BIN is not set; `make test` builds them and sets them")
	}
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	build := func(binaries string) string {
		out := t.TempDir()
		cmd := exec.Command("bash", filepath.Join(root, "release", "build.sh"), out)
		cmd.Env = append(os.Environ(), "KO_DOCKER_REPO="+repo, "SLUICE_VERSION="+version, "BINARIES="+binaries)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release/build.sh: %v\n%s", err, b)
		}
		return out
	}
	out := build(strings.Join(targets, " "))

	idx := readIndex(t, filepath.Join(out, "oci"))
	idxDigest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	var host v1.Image
	for _, desc := range im.Manifests {
		if desc.Platform == nil || desc.Platform.OS != "linux" {
			t.Errorf("manifest %s: platform %v, want linux/*", desc.Digest, desc.Platform)
			continue
		}
		arches = append(arches, desc.Platform.Architecture)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, desc.Platform.Architecture, img)
		checkSBOM(t, filepath.Join(out, "sbom", "sluice-linux-"+desc.Platform.Architecture+".spdx.json"))
		if desc.Platform.Architecture == runtime.GOARCH {
			host = img
		}
	}
	if strings.Join(arches, ",") != "amd64,arm64" {
		t.Errorf("platforms %v, want amd64 and arm64", arches)
	}
	if host == nil {
		t.Fatalf("no image for the host's architecture %s", runtime.GOARCH)
	}
	runBinary(t, host)
	checkTarball(t, filepath.Join(out, "sluice-linux-"+runtime.GOARCH+".tar"), host)
	image := repo + "/sluice@" + idxDigest.String()
	checkManifests(t, filepath.Join(out, "sluice.yaml"), image)
	checkBinaries(t, out)
	checkChart(t, out, image)
	sums := checkSums(t, out)

	// The same commit again: the same image, manifests, chart and binary.
	again := build("linux/" + runtime.GOARCH)
	idx2 := readIndex(t, filepath.Join(again, "oci"))
	if d, err := idx2.Digest(); err != nil || d != idxDigest {
		t.Errorf("a second build of the same commit gives the image %s, the first %s (%v): the build is not reproducible", d, idxDigest, err)
	}
	for name, sum := range checkSums(t, again) {
		if sums[name] != sum {
			t.Errorf("a second build of the same commit gives %s with sha256 %s, the first %s", name, sum, sums[name])
		}
	}
}

func readIndex(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("reading the OCI layout: %v", err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("layout holds %d manifests, want one multi-platform index: %+v", len(m.Manifests), m.Manifests)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func checkImage(t *testing.T, arch string, img v1.Image) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// A kubelet can only enforce runAsNonRoot when the user is a number.
	if cfg.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532", arch, cfg.Config.User)
	}
	if cfg.Architecture != arch {
		t.Errorf("%s: config says architecture %q", arch, cfg.Architecture)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/ko-app/sluice" {
		t.Errorf("%s: entrypoint %q, want /ko-app/sluice", arch, got)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		size += n
	}
	t.Logf("%s: %d layers, %.1f MiB compressed", arch, len(layers), float64(size)/(1<<20))
	if size > maxCompressed {
		t.Errorf("%s: image is %d bytes compressed, want at most %d", arch, size, maxCompressed)
	}

	files := flatten(t, img)
	for _, want := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group", "ko-app/sluice"} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s: image has no /%s", arch, want)
		}
	}
	for _, shell := range []string{"bin/sh", "bin/bash", "usr/bin/sh"} {
		if _, ok := files[shell]; ok {
			t.Errorf("%s: image has a shell at /%s; it should hold nothing but sluice and its certificates", arch, shell)
		}
	}
	if !bytes.Contains(files["etc/passwd"].body, []byte("nonroot:x:65532:65532:")) {
		t.Errorf("%s: /etc/passwd does not name user 65532:\n%s", arch, files["etc/passwd"].body)
	}
	if h := files["tmp"].hdr; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("%s: /tmp missing or not world-writable with the sticky bit", arch)
	}
}

type entry struct {
	hdr  *tar.Header
	body []byte
}

// flatten reads the image's filesystem as a container runtime would unpack
// it; bodies are kept for the files the test reads.
func flatten(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]entry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/")
		e := entry{hdr: h}
		if h.Typeflag == tar.TypeReg && (strings.HasPrefix(name, "etc/") || name == "ko-app/sluice") {
			if e.body, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		files[name] = e
	}
	return files
}

// runBinary runs the image's sluice (static, so it runs here as it would in
// the container) and checks the version it was stamped with.
func runBinary(t *testing.T, img v1.Image) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	if err := os.WriteFile(bin, flatten(t, img)["ko-app/sluice"].body, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version", "--client").CombinedOutput()
	if err != nil {
		t.Fatalf("the image's sluice version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), version) {
		t.Errorf("the image's sluice version printed %q, want it to contain %q", out, version)
	}
}

// checkTarball: the tarball is built separately from the layout; the build is
// reproducible, so it must be the very same image.
func checkTarball(t *testing.T, path string, want v1.Image) {
	t.Helper()
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	got, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	wantID, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got != wantID {
		t.Errorf("the tarball's image %s differs from the layout's %s for the same platform", got, wantID)
	}
}

// checkManifests: every container of the resolved manifests runs the built
// image by digest; no ko:// path is left.
func checkManifests(t *testing.T, path, wantImage string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("ko://")) {
		t.Errorf("%s still has ko:// paths", path)
	}
	images := regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindAllSubmatch(b, -1)
	if len(images) < 2 {
		t.Fatalf("%s names %d images, want the worker's and the receiver's", path, len(images))
	}
	for _, m := range images {
		if string(m[1]) != wantImage {
			t.Errorf("manifest image %s, want %s", m[1], wantImage)
		}
	}
	kinds := map[string]int{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		kinds[obj.Kind]++
	}
	if kinds["Deployment"] != 2 || kinds["ApiServerSource"] != 1 || kinds["Namespace"] != 1 {
		t.Errorf("resolved manifests hold %v; want config/deploy's objects (2 Deployments, an ApiServerSource, the Namespace)", kinds)
	}
}
