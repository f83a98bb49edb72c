package capacity

import (
	"fmt"
	"strings"
	"testing"
)

func TestSurgePods(t *testing.T) {
	for _, tc := range []struct {
		strategy Strategy
		r, pods  int32
		percent  int64
		want     int32
	}{
		{Availability, 8, 0, 10, 1},  // 0.8 rounds up to 1
		{Availability, 20, 0, 10, 2}, // exactly 2
		{Availability, 21, 0, 10, 3}, // 2.1 rounds up
		{Availability, 8, 2, 0, 2},   // a pod count
		{Availability, 8, 0, 0, 1},   // at least 1
		{Resource, 8, 2, 10, 0},      // never above today's count
	} {
		if got := SurgePods(tc.strategy, tc.r, tc.pods, tc.percent); got != tc.want {
			t.Errorf("SurgePods(%s, r=%d, pods=%d, %d%%) = %d, want %d", tc.strategy, tc.r, tc.pods, tc.percent, got, tc.want)
		}
	}
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       int32
		surge   int32
		weights []int64
		want    string
	}{
		{"one pod at a time", 8, 1, nil, "1/7=13 2/6=25 3/5=38 4/4=50 5/3=63 6/2=75 7/1=88 8/0=100"},
		{"two pods at a time", 8, 2, nil, "2/6=25 4/4=50 6/2=75 8/0=100"},
		{"a surge that does not divide", 5, 2, nil, "2/3=40 4/1=80 5/0=100"},
		{"resource: no surge moves one pod", 3, 0, nil, "1/2=33 2/1=67 3/0=100"},
		{"one pod", 1, 1, nil, "1/0=100"},
		{"surge above the count", 2, 5, nil, "2/0=100"},
		{"explicit steps take the ceiling", 8, 1, []int64{10, 25, 50, 100}, "1/8=10 2/6=25 4/4=50 8/0=100"},
		{"explicit steps on few pods", 3, 1, []int64{10, 50, 100}, "1/3=10 2/2=50 3/0=100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stages, err := Plan(Availability, tc.r, tc.surge, tc.weights)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for i, s := range stages {
				if i > 0 {
					got += " "
				}
				got += fmt.Sprintf("%d/%d=%d", s.Candidate, s.Stable, s.Weight)
				// Neither Revision's share exceeds its share of the pods
				// (by at most the rounding of the shares to whole percents).
				if s.Weight*int64(tc.r) > int64(s.Candidate)*100+int64(tc.r)/2 {
					t.Errorf("stage %d: %d%% on %d of %d pods", i, s.Weight, s.Candidate, tc.r)
				}
				if (100-s.Weight)*int64(tc.r) > int64(s.Stable)*100+int64(tc.r)/2 {
					t.Errorf("stage %d: the stable serves %d%% on %d of %d pods", i, 100-s.Weight, s.Stable, tc.r)
				}
			}
			if got != tc.want {
				t.Fatalf("Plan(%d, %d, %v) = %s, want %s", tc.r, tc.surge, tc.weights, got, tc.want)
			}
		})
	}
}

func TestPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		strategy Strategy
		r        int32
		weights  []int64
		want     string
	}{
		{Availability, 0, nil, "runs 0 pods"},
		{Availability, 8, []int64{10, 50}, "must be 100"},
		{Availability, 8, []int64{0, 100}, "between 1 and 100"},
		// One pod cannot be split: the candidate's first pod is all of it.
		{Resource, 1, []int64{10, 100}, "the resource strategy needs more pods"},
	} {
		if _, err := Plan(tc.strategy, tc.r, 1, tc.weights); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Plan(%s, %d, %v): %v, want an error containing %q", tc.strategy, tc.r, tc.weights, err, tc.want)
		}
	}
	// With the availability strategy the stable keeps its pod from the surge.
	if got, err := Plan(Availability, 1, 1, []int64{10, 100}); err != nil || got[0] != (Stage{Candidate: 1, Stable: 1, Weight: 10}) {
		t.Errorf("Plan(availability, 1, [10 100]) = %+v, %v", got, err)
	}
}

// The bound the issue asks for: availability never runs more than r+surge
// pods, resource never more than r, whatever the stage sizes.
func TestPeakStaysWithinTheAllowance(t *testing.T) {
	for r := int32(1); r <= 16; r++ {
		for surge := int32(0); surge <= 4; surge++ {
			strategy := Availability
			if surge == 0 {
				strategy = Resource
			}
			stages, err := Plan(strategy, r, surge, nil)
			if err != nil {
				t.Fatal(err)
			}
			prev := Stage{Stable: r}
			limit := r + surge
			for _, s := range stages {
				if p := Peak(strategy, prev, s); p > limit {
					t.Fatalf("r=%d surge=%d %s: %+v -> %+v peaks at %d pods, limit %d", r, surge, strategy, prev, s, p, limit)
				}
				prev = s
			}
		}
	}
}
