package images

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// targets are the os/arch pairs a release ships the binary for.
var targets = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// checkSBOM: ko's SPDX document for one platform's image lists the Go
// modules linked into sluice.
func checkSBOM(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("no SBOM: %v", err)
		return
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name, VersionInfo string
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	found := map[string]string{}
	for _, p := range doc.Packages {
		found[p.Name] = p.VersionInfo
	}
	if !strings.HasPrefix(doc.SPDXVersion, "SPDX-2") {
		t.Errorf("%s: spdxVersion %q", path, doc.SPDXVersion)
	}
	for _, mod := range []string{"go.temporal.io/sdk", "knative.dev/serving", "github.com/cloudevents/sdk-go/v2", "k8s.io/client-go"} {
		if found[mod] == "" {
			t.Errorf("%s lists no version of %s (%d packages)", filepath.Base(path), mod, len(doc.Packages))
		}
	}
}

// checkBinaries: one static binary per target, of that os and architecture;
// the host's runs and reports the version.
func checkBinaries(t *testing.T, out string) {
	t.Helper()
	for _, target := range targets {
		goos, arch, _ := strings.Cut(target, "/")
		path := filepath.Join(out, "sluice-"+goos+"-"+arch)
		var got string
		switch goos {
		case "linux":
			f, err := elf.Open(path)
			if err != nil {
				t.Errorf("%s: %v", target, err)
				continue
			}
			got = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s: dynamically linked (it names an interpreter); a release binary is static", target)
				}
			}
			f.Close()
		case "darwin":
			f, err := macho.Open(path)
			if err != nil {
				t.Errorf("%s: %v", target, err)
				continue
			}
			got = map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
			f.Close()
		}
		if got != arch {
			t.Errorf("%s: the binary is for %q", target, got)
		}
	}
	host := filepath.Join(out, "sluice-"+runtime.GOOS+"-"+runtime.GOARCH)
	b, err := exec.Command(host, "version", "--client").CombinedOutput()
	if err != nil || !strings.Contains(string(b), version) {
		t.Errorf("%s version --client: %v\n%s; want it to report %s", host, err, b, version)
	}
}

// checkChart: the packaged chart carries the release's version and renders
// the image just built, by digest.
func checkChart(t *testing.T, out, image string) {
	t.Helper()
	pkg := filepath.Join(out, "sluice-"+strings.TrimPrefix(version, "v")+".tgz")
	b, err := exec.Command(os.Getenv("SLUICE_HELM_BIN"), "template", "sluice", pkg, "--namespace", "sluice-system").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", pkg, err, b)
	}
	rendered := string(b)
	if n := strings.Count(rendered, "image: "+image+"\n"); n != 2 {
		t.Errorf("the packaged chart names %s %d times, want the worker's and the receiver's:\n%s", image, n, rendered)
	}
	if !strings.Contains(rendered, `app.kubernetes.io/version: "`+version+`"`) {
		t.Errorf("the packaged chart's appVersion is not %s", version)
	}
}

// checkSums: SHA256SUMS lists every file of the release (but the OCI
// layout, which is content-addressed itself) with its right checksum.
func checkSums(t *testing.T, out string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: %q is not `sum  name`", sc.Text())
		}
		sums[name] = sum
	}
	var files []string
	err = filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(out, path)
		if d.IsDir() && rel == "oci" {
			return filepath.SkipDir
		}
		if !d.IsDir() && rel != "SHA256SUMS" {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if sums[name] == "" {
			t.Errorf("SHA256SUMS does not list %s", name)
			continue
		}
		if got := fileSum(t, filepath.Join(out, name)); got != sums[name] {
			t.Errorf("SHA256SUMS says %s for %s; it is %s", sums[name], name, got)
		}
	}
	if len(sums) != len(files) {
		t.Errorf("SHA256SUMS lists %d files, the release has %d: %v", len(sums), len(files), files)
	}
	return sums
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
