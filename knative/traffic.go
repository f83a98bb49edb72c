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
