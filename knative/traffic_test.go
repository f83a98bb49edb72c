package knative

import (
	"strings"
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func TestValidateTraffic(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		traffic []servingv1.TrafficTarget
		want    string // substring of the error; empty means valid
	}{
		{"one revision", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(100))}}, ""},
		{"split with tags", KindService, []servingv1.TrafficTarget{
			{RevisionName: "a", Percent: new(int64(90))}, {RevisionName: "b", Percent: new(int64(10)), Tag: "canary"}, {RevisionName: "a", Tag: "current"}}, ""},
		{"latest on a service", KindService, []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}}, ""},
		{"route with configuration", KindRoute, []servingv1.TrafficTarget{{ConfigurationName: "c", LatestRevision: new(true), Percent: new(int64(100))}}, ""},
		{"empty", KindService, nil, "Traffic targets sum to 0, want 100: spec.traffic"},
		{"sum below 100", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(60))}, {RevisionName: "b", Percent: new(int64(30))}}, "Traffic targets sum to 90, want 100"},
		{"sum above 100", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(60))}, {RevisionName: "b", Percent: new(int64(50))}}, "Traffic targets sum to 110, want 100"},
		{"negative percent", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(110))}, {RevisionName: "b", Percent: new(int64(-10))}}, "expected 0 <= -10 <= 100: spec.traffic[1].percent"},
		{"duplicate tag", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(100)), Tag: "x"}, {RevisionName: "b", Tag: "x"}}, `Multiple definitions for "x": spec.traffic[0].tag, spec.traffic[1].tag`},
		{"tag not DNS-1035", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(100)), Tag: "1-Bad_tag"}}, "not a DNS 1035 label"},
		{"latest with a name", KindService, []servingv1.TrafficTarget{{RevisionName: "a", LatestRevision: new(true), Percent: new(int64(100))}}, `may not set revisionName "a" when latestRevision is true: spec.traffic[0].latestRevision`},
		{"not latest without a name", KindService, []servingv1.TrafficTarget{{LatestRevision: new(false), Percent: new(int64(100))}}, `may not set revisionName "" when latestRevision is false`},
		// Knative's webhook defaults such a Service target to latestRevision.
		{"names nothing on a Service", KindService, []servingv1.TrafficTarget{{Percent: new(int64(100))}}, ""},
		{"names nothing on a Route", KindRoute, []servingv1.TrafficTarget{{Percent: new(int64(100))}}, "expected exactly one, got neither: spec.traffic[0].configurationName, spec.traffic[0].revisionName"},
		{"configuration on a service", KindService, []servingv1.TrafficTarget{{ConfigurationName: "c", Percent: new(int64(100))}}, "must not set the field(s): spec.traffic[0].configurationName"},
		{"route latest without configuration", KindRoute, []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(100))}}, "expected exactly one, got neither"},
		{"revision and configuration", KindRoute, []servingv1.TrafficTarget{{RevisionName: "a", ConfigurationName: "c", Percent: new(int64(100))}}, "expected exactly one, got both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateTraffic(tt.kind, tt.traffic)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestSameTraffic(t *testing.T) {
	a := []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(100))}, {RevisionName: "b", Tag: "t"}}
	b := []servingv1.TrafficTarget{{RevisionName: "a", Percent: new(int64(100)), LatestRevision: new(false)}, {RevisionName: "b", Tag: "t", Percent: new(int64(0))}}
	if !SameTraffic(a, b) {
		t.Fatal("unset and zero percent, unset and false latestRevision must compare equal")
	}
	b[1].Tag = "u"
	if SameTraffic(a, b) {
		t.Fatal("a changed tag must compare different")
	}
	if SameTraffic(a, a[:1]) {
		t.Fatal("a missing target must compare different")
	}
}

func TestStatusShows(t *testing.T) {
	desired := []servingv1.TrafficTarget{{LatestRevision: new(true), Percent: new(int64(50))}, {RevisionName: "b", Percent: new(int64(50)), Tag: "canary"}}
	status := []servingv1.TrafficTarget{{RevisionName: "a", LatestRevision: new(true), Percent: new(int64(50))}, {RevisionName: "b", Percent: new(int64(50)), Tag: "canary"}}
	if !StatusShows(desired, status) {
		t.Fatal("status naming the latest revision must match a latestRevision target")
	}
	status[1].Percent = new(int64(40))
	if StatusShows(desired, status) {
		t.Fatal("a different percent must not match")
	}
}
