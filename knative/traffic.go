package knative

import (
	"context"
	"fmt"
	"strings"

	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// ValidateTraffic checks a traffic list with Knative's own validation, in
// the context its admission webhook gives a Service's or a Route's spec.
// sluice must not rely on the webhook: without it (or on an API server where
// it is not installed) a broken list is stored, and Knative freezes the whole
// Route on it. kind is the object the list is written to: KindService (which
// may not name Configurations) or KindRoute.
func ValidateTraffic(kind string, traffic []servingv1.TrafficTarget) error {
	ctx := apis.WithinSpec(context.Background())
	if kind == KindService {
		ctx = servingv1.WithDefaultConfigurationName(ctx)
	}
	if err := (&servingv1.RouteSpec{Traffic: traffic}).Validate(ctx).ViaField("spec"); err != nil {
		return err
	}
	return nil
}

// SameTraffic reports whether two traffic lists route the same way: same
// targets in the same order with the same tags and percents. Unset and zero
// percents are equal, as are unset and false latestRevision; status-only URLs
// are ignored.
func SameTraffic(a, b []servingv1.TrafficTarget) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameTarget(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameTarget(a, b servingv1.TrafficTarget) bool {
	return a.Tag == b.Tag && a.RevisionName == b.RevisionName && a.ConfigurationName == b.ConfigurationName &&
		IsLatest(a) == IsLatest(b) && Percent(a) == Percent(b)
}

// StatusShows reports whether a status traffic list carries the desired spec:
// the status names every revision, so a latestRevision target matches any
// revision name there.
func StatusShows(desired, status []servingv1.TrafficTarget) bool {
	if len(desired) != len(status) {
		return false
	}
	for i, d := range desired {
		s := status[i]
		if d.Tag != s.Tag || Percent(d) != Percent(s) {
			return false
		}
		if !IsLatest(d) && d.RevisionName != "" && d.RevisionName != s.RevisionName {
			return false
		}
	}
	return true
}

// IsLatest reports whether a target follows the latest Ready Revision.
func IsLatest(t servingv1.TrafficTarget) bool { return t.LatestRevision != nil && *t.LatestRevision }

// CloneTraffic copies a traffic list deeply, without the status-only URL,
// so a list read from an object or its status can be changed and written
// to a spec. nil stays nil.
func CloneTraffic(in []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	if in == nil {
		return nil
	}
	out := make([]servingv1.TrafficTarget, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
		out[i].URL = nil
	}
	return out
}

// DefaultTraffic is a Service's spec.traffic as Knative reads it: a Service
// that gives none (written where Knative's defaulting webhook did not run)
// sends all of it to its latest Ready Revision, as Knative's own defaulting
// of a Service's route says.
func DefaultTraffic(traffic []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	if len(traffic) > 0 {
		return traffic
	}
	var spec servingv1.RouteSpec
	spec.SetDefaults(servingv1.WithDefaultConfigurationName(context.Background()))
	return spec.Traffic
}

// PinLatest returns a copy of traffic in which each latestRevision target
// that carries a share is pinned to the Revision it resolves to now, by
// name: while such a target is live, Knative would send its whole share to
// a new Revision the moment it is Ready. A latestRevision target at 0% stays
// as it is (its tag keeps following the latest Ready Revision): it routes
// nothing, and Knative only ever resolves it to a Ready Revision.
//
// resolved names the Revision each target resolves to (status.traffic), ""
// where it is not known; to is used where it is not. pinned counts the
// targets pinned.
func PinLatest(traffic []servingv1.TrafficTarget, resolved []string, to string) (out []servingv1.TrafficTarget, pinned int) {
	out = CloneTraffic(traffic)
	for i := range out {
		if !IsLatest(out[i]) || Percent(out[i]) == 0 {
			continue
		}
		name := to
		if i < len(resolved) && resolved[i] != "" {
			name = resolved[i]
		}
		if name == "" {
			continue
		}
		out[i].LatestRevision, out[i].RevisionName, out[i].ConfigurationName = new(false), name, ""
		pinned++
	}
	return out, pinned
}

// Percent is a target's percent, 0 when unset.
func Percent(t servingv1.TrafficTarget) int64 {
	if t.Percent == nil {
		return 0
	}
	return *t.Percent
}

// FormatTraffic renders a traffic list compactly for messages and the UI,
// e.g. "hello-00001=90% hello-00002=10% (tag canary)".
func FormatTraffic(traffic []servingv1.TrafficTarget) string {
	parts := make([]string, 0, len(traffic))
	for _, t := range traffic {
		name := t.RevisionName
		switch {
		case IsLatest(t) && t.ConfigurationName != "":
			name = "latest(" + t.ConfigurationName + ")"
		case IsLatest(t):
			name = "latest"
		case name == "" && t.ConfigurationName != "":
			name = t.ConfigurationName
		}
		s := fmt.Sprintf("%s=%d%%", name, Percent(t))
		if t.Tag != "" {
			s += " (tag " + t.Tag + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}
