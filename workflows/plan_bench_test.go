package workflows

import (
	"fmt"
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// BenchmarkTrafficAt measures computing one step's traffic list, which the
// workflow does once per step and again on every replay.
func BenchmarkTrafficAt(b *testing.B) {
	for _, extra := range []int{0, 8} {
		base := []servingv1.TrafficTarget{tgt("stable", int64(100-extra), "")}
		for i := 0; i < extra; i++ {
			base = append(base, tgt(fmt.Sprintf("old-%d", i), 1, fmt.Sprintf("t%d", i)))
		}
		b.Run(fmt.Sprintf("targets=%d", len(base)), func(b *testing.B) {
			for b.Loop() {
				_ = trafficAt(base, "stable", "cand", 25)
			}
		})
	}
}
