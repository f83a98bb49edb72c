// Command base writes sluice's base image into an OCI image layout, so that ko
// can build sluice's images without pulling anything from a registry.
//
// The image holds only what a static Go program needs at run time: the CA
// bundle (for TLS to Temporal Cloud and the Kubernetes API), /etc/passwd and
// /etc/group naming an unprivileged user, and a writable /tmp. It runs as that
// user by number, which is what a kubelet needs to enforce runAsNonRoot.
//
// The output is reproducible: every timestamp is the Unix epoch, so the same
// CA bundle always yields the same digest, and re-running leaves the layout as
// it was. It prints the digest of the multi-platform index.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user the images run as; 65532 is the number distroless and
// Chainguard images use, so cluster policies written for those accept it.
const nonroot = 65532

func main() {
	layoutDir := flag.String("layout", "", "OCI image layout to add the base image to (created if missing)")
	caFile := flag.String("ca", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put at /etc/ssl/certs/ca-certificates.crt")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.Parse()
	if *layoutDir == "" {
		fmt.Fprintln(os.Stderr, "usage: base -layout DIR [-ca FILE] [-platforms linux/amd64,...]")
		os.Exit(2)
	}
	digest, err := run(*layoutDir, *caFile, *platforms)
	if err != nil {
		slog.Error("writing the base image", "err", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

func run(layoutDir, caFile, platformList string) (v1.Hash, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading the CA bundle (install Debian's ca-certificates package, or pass -ca): %w", err)
	}
	layer, err := rootLayer(ca)
	if err != nil {
		return v1.Hash{}, err
	}
	platforms, err := parsePlatforms(platformList)
	if err != nil {
		return v1.Hash{}, err
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var images []v1.Image
	for _, p := range platforms {
		img, err := platformImage(layer, p)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image for %s/%s: %w", p.OS, p.Architecture, err)
		}
		images = append(images, img)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}

	path, err := openLayout(layoutDir)
	if err != nil {
		return v1.Hash{}, err
	}
	// ko's image cache looks base images up by digest among the layout's
	// top-level manifests, so the index and each platform's image are all
	// listed there. Replace (rather than append) keeps re-runs idempotent.
	for _, img := range images {
		d, err := img.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		if err := path.ReplaceImage(img, match.Digests(d)); err != nil {
			return v1.Hash{}, fmt.Errorf("writing image %s: %w", d, err)
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := path.ReplaceIndex(idx, match.Digests(d)); err != nil {
		return v1.Hash{}, fmt.Errorf("writing index %s: %w", d, err)
	}
	return d, nil
}

func openLayout(dir string) (layout.Path, error) {
	p, err := layout.FromPath(dir)
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("opening OCI layout %s: %w", dir, err)
	}
	p, err = layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("creating OCI layout %s: %w", dir, err)
	}
	return p, nil
}

func parsePlatforms(list string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, s := range strings.Split(list, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch, for example linux/amd64", s)
		}
		out = append(out, *p)
	}
	return out, nil
}

func platformImage(layer v1.Layer, p v1.Platform) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = p.OS
	cfg.Architecture = p.Architecture
	cfg.Variant = p.Variant
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.Config.WorkingDir = "/home/nonroot"
	cfg.Config.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
	}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.description": "sluice base: CA bundle and an unprivileged user, nothing else",
	}
	return mutate.ConfigFile(img, cfg)
}

// rootLayer is the one filesystem layer, as a deterministic tar.
func rootLayer(ca []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := []struct {
		name     string
		mode     int64
		uid, gid int
	}{
		{"etc/", 0o755, 0, 0},
		{"etc/ssl/", 0o755, 0, 0},
		{"etc/ssl/certs/", 0o755, 0, 0},
		{"home/", 0o755, 0, 0},
		{"home/nonroot/", 0o700, nonroot, nonroot},
		{"tmp/", 0o1777, 0, 0},
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, Uid: d.uid, Gid: d.gid, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	files := []struct {
		name string
		body []byte
	}{
		{"etc/passwd", []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{"etc/group", []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot))},
		// Go's resolver consults nsswitch.conf to decide whether /etc/hosts
		// comes before DNS; say so explicitly.
		{"etc/nsswitch.conf", []byte("hosts: files dns\n")},
		{"etc/ssl/certs/ca-certificates.crt", ca},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
