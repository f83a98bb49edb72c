package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The stack's Prometheus runs the scrape job docs/analysis.md gives users:
// the page must show it as it is.
func TestScrapeConfigIsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	job, err := os.ReadFile(filepath.Join(root, ScrapeConfig))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "analysis.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(job)+"```") {
		t.Fatalf("docs/analysis.md does not show %s as it is", ScrapeConfig)
	}
}
