package integrations

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/mirror"
)

// exprs collects every "expr" string in a decoded Grafana dashboard.
func exprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			exprs(e, out)
		}
	case []any:
		for _, e := range v {
			exprs(e, out)
		}
	}
}

var (
	metricName = regexp.MustCompile(`\bsluice_[a-z_]+`)
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// TestDashboardNamesExportedMetrics: every metric a query of the shipped
// Grafana dashboard reads is one the worker exports.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	m := mirror.NewMetrics(prometheus.NewRegistry(), &mirror.Writer{})
	exported := map[string]bool{}
	descs := make(chan *prometheus.Desc, 64)
	go func() {
		defer close(descs)
		m.Describe(descs)
	}()
	for d := range descs {
		if n := descName.FindStringSubmatch(d.String()); n != nil {
			exported[n[1]] = true
		}
	}
	if len(exported) < 5 {
		t.Fatalf("the worker describes only %v", exported)
	}
	b, err := os.ReadFile(filepath.Join("grafana", "sluice-rollouts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var qs []string
	exprs(dash, &qs)
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	var used []string
	for _, q := range qs {
		for _, n := range metricName.FindAllString(q, -1) {
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			used = append(used, n)
			if !exported[base] {
				t.Errorf("the dashboard queries %s, which the worker does not export (query %q)", n, q)
			}
		}
	}
	sort.Strings(used)
	t.Logf("%d queries over %d metric names, all exported", len(qs), len(used))
}
