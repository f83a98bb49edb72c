package knative

import (
	"fmt"
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// BenchmarkValidateTraffic measures the check every traffic write runs first.
func BenchmarkValidateTraffic(b *testing.B) {
	for _, n := range []int{2, 10} {
		traffic := []servingv1.TrafficTarget{{RevisionName: "stable", Percent: new(int64(100))}}
		for i := 1; i < n; i++ {
			traffic = append(traffic, servingv1.TrafficTarget{RevisionName: fmt.Sprintf("r%d", i), Tag: fmt.Sprintf("tag-%d", i)})
		}
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			for b.Loop() {
				if err := ValidateTraffic(KindService, traffic); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
