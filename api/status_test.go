package api

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationReadsStringsAndEarlierNanoseconds(t *testing.T) {
	b, err := json.Marshal(StepStatus{Weight: 10, Hold: Duration(90 * time.Second)})
	if err != nil || string(b) != `{"weight":10,"hold":"1m30s"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	for in, want := range map[string]time.Duration{`"1m30s"`: 90 * time.Second, `90000000000`: 90 * time.Second, `"0s"`: 0} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("Unmarshal(%s) = %s, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{`"soon"`, `true`, `{}`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Unmarshal(%s) = %s, want an error", in, d)
		}
	}
}
