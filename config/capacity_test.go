package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/capacity"
)

func TestCapacityPolicy(t *testing.T) {
	on := func(kv ...string) map[string]string {
		a := map[string]string{AnnotationRollout: "enabled"}
		for i := 0; i+1 < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return a
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want *Capacity
	}{
		{"off", on(), nil},
		{"availability with defaults", on(AnnotationCapacity, "availability"),
			&Capacity{Strategy: capacity.Availability, SurgePercent: 10, StageTimeout: 5 * time.Minute, StepsFromPods: true}},
		{"a surge in pods, rollback on timeout", on(AnnotationCapacity, "Availability", AnnotationCapacitySurge, "2",
			AnnotationCapacityTimeout, "90s", AnnotationCapacityOnTimeout, "rollback"),
			&Capacity{Strategy: capacity.Availability, SurgePods: 2, StageTimeout: 90 * time.Second, RollbackOnTimeout: true, StepsFromPods: true}},
		{"resource with listed steps", on(AnnotationCapacity, "resource", AnnotationSteps, "25,50,100"),
			&Capacity{Strategy: capacity.Resource, StageTimeout: 5 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := FromAnnotations(tc.ann, BuiltinDefaults())
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == nil && p.Capacity != nil:
				t.Fatalf("capacity = %+v, want none", p.Capacity)
			case tc.want != nil && (p.Capacity == nil || *p.Capacity != *tc.want):
				t.Fatalf("capacity = %+v, want %+v", p.Capacity, tc.want)
			}
		})
	}
}

func TestCapacityPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{AnnotationCapacity: "fast"}, `sluice.dev/capacity: must be "availability"`},
		{map[string]string{AnnotationCapacitySurge: "2"}, "has no effect without sluice.dev/capacity"},
		{map[string]string{AnnotationCapacity: "resource", AnnotationCapacitySurge: "2"}, "has no effect with the resource strategy"},
		{map[string]string{AnnotationCapacity: "availability", AnnotationCapacitySurge: "0"}, "number of pods of 1 or more"},
		{map[string]string{AnnotationCapacity: "availability", AnnotationCapacitySurge: "150%"}, "share from 1% to 100%"},
		{map[string]string{AnnotationCapacity: "availability", AnnotationCapacityTimeout: "soon"}, "sluice.dev/capacity-timeout: is not a duration"},
		{map[string]string{AnnotationCapacity: "availability", AnnotationCapacityOnTimeout: "retry"}, `must be "pause" or "rollback"`},
		{map[string]string{AnnotationCapacity: "availability", AnnotationGates: "100"}, "derives its steps from the stable's pods"},
	} {
		_, err := FromAnnotations(tc.ann, BuiltinDefaults())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.ann, err, tc.want)
		}
	}
}
