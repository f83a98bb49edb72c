package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

func TestName(t *testing.T) {
	if got := Name(t, 40); got != "name" {
		t.Fatalf("Name = %q, want name", got)
	}
	t.Run("A Sub/test with_Odd chars and a name far too long for a Service", func(t *testing.T) {
		got := Name(t, 30)
		if len(got) > 30 || !strings.HasPrefix(got, "name-a-sub-test") || strings.Contains(got, "--") {
			t.Fatalf("Name = %q", got)
		}
		if again := Name(t, 30); again != got {
			t.Fatalf("Name is not stable: %q then %q", got, again)
		}
	})
}

func TestScanAuditSkipsTornLinesAndReadsTraffic(t *testing.T) {
	log := `{"stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"services","name":"s"},"requestObject":{"spec":{"traffic":[{"revisionName":"s-00002","percent":10}]}}}
{"stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"services","name":"s"},"requestObject":[{"op":"test","path":"/metadata/generation","value":4},{"op":"add","path":"/spec/traffic","value":[{"revisionName":"s-00002","percent":30}]}]}
{"stage":"RequestReceived","verb":"patch"}
{"stage":"ResponseComplete","verb":"get","objectRef":{"resource":"services","name":"s"}}
{"stage":"ResponseComp`
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	var percents []string
	err := ScanAudit(path, func(e *auditv1.Event) error {
		verbs = append(verbs, e.Verb)
		if tr, ok := TrafficOf(e); ok {
			percents = append(percents, fmt.Sprint(*tr[0].Percent))
		}
		return nil
	})
	// A merge patch's traffic and a JSON patch's.
	if err != nil || strings.Join(verbs, ",") != "patch,patch,get" || strings.Join(percents, ",") != "10,30" {
		t.Fatalf("ScanAudit: verbs %v, traffic %v%%, %v", verbs, percents, err)
	}
}
