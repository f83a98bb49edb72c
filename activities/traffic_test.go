package activities

import (
	"strings"
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func pct(n int64) *int64 { return &n }
func yes() *bool         { b := true; return &b }
func no() *bool          { b := false; return &b }

func TestValidateTraffic(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		traffic []servingv1.TrafficTarget
		want    string // substring of the error; empty means valid
	}{
		{"one revision", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(100)}}, ""},
		{"split with tags", KindService, []servingv1.TrafficTarget{
			{RevisionName: "a", Percent: pct(90)}, {RevisionName: "b", Percent: pct(10), Tag: "canary"}, {RevisionName: "a", Tag: "current"}}, ""},
		{"latest on a service", KindService, []servingv1.TrafficTarget{{LatestRevision: yes(), Percent: pct(100)}}, ""},
		{"route with configuration", KindRoute, []servingv1.TrafficTarget{{ConfigurationName: "c", LatestRevision: yes(), Percent: pct(100)}}, ""},
		{"empty", KindService, nil, "at least one target"},
		{"sum below 100", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(60)}, {RevisionName: "b", Percent: pct(30)}}, "must sum to 100, got 90"},
		{"sum above 100", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(60)}, {RevisionName: "b", Percent: pct(50)}}, "got 110"},
		{"negative percent", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(110)}, {RevisionName: "b", Percent: pct(-10)}}, "spec.traffic[1].percent: must be between 0 and 100, got -10"},
		{"duplicate tag", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(100), Tag: "x"}, {RevisionName: "b", Tag: "x"}}, `spec.traffic[1].tag: "x" is already used by spec.traffic[0]`},
		{"tag not DNS-1035", KindService, []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(100), Tag: "1-Bad_tag"}}, `spec.traffic[0].tag: "1-Bad_tag" is not a valid tag`},
		{"latest with a name", KindService, []servingv1.TrafficTarget{{RevisionName: "a", LatestRevision: yes(), Percent: pct(100)}}, "must be empty when latestRevision is true"},
		{"not latest without a name", KindService, []servingv1.TrafficTarget{{LatestRevision: no(), Percent: pct(100)}}, "is required when latestRevision is false"},
		{"names nothing", KindService, []servingv1.TrafficTarget{{Percent: pct(100)}}, "names no revision"},
		{"configuration on a service", KindService, []servingv1.TrafficTarget{{ConfigurationName: "c", Percent: pct(100)}}, "a Service's traffic may not name a Configuration"},
		{"route latest without configuration", KindRoute, []servingv1.TrafficTarget{{LatestRevision: yes(), Percent: pct(100)}}, "needs a configurationName"},
		{"revision and configuration", KindRoute, []servingv1.TrafficTarget{{RevisionName: "a", ConfigurationName: "c", Percent: pct(100)}}, "not both"},
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
	a := []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(100)}, {RevisionName: "b", Tag: "t"}}
	b := []servingv1.TrafficTarget{{RevisionName: "a", Percent: pct(100), LatestRevision: no()}, {RevisionName: "b", Tag: "t", Percent: pct(0)}}
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
	desired := []servingv1.TrafficTarget{{LatestRevision: yes(), Percent: pct(50)}, {RevisionName: "b", Percent: pct(50), Tag: "canary"}}
	status := []servingv1.TrafficTarget{{RevisionName: "a", LatestRevision: yes(), Percent: pct(50)}, {RevisionName: "b", Percent: pct(50), Tag: "canary"}}
	if !StatusShows(desired, status) {
		t.Fatal("status naming the latest revision must match a latestRevision target")
	}
	status[1].Percent = pct(40)
	if StatusShows(desired, status) {
		t.Fatal("a different percent must not match")
	}
}
