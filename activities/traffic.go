package activities

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// ValidateTraffic checks a traffic list the way Knative's admission webhook
// would. sluice must not rely on the webhook: without it (or on an API server
// where it is not installed) a broken list is stored, and Knative freezes the
// whole Route on it. kind is the object the list is written to: KindService
// (which may not name Configurations) or KindRoute.
func ValidateTraffic(kind string, traffic []servingv1.TrafficTarget) error {
	if len(traffic) == 0 {
		return errors.New("spec.traffic: at least one target is required")
	}
	var errs []error
	tags := map[string]int{}
	var sum int64
	for i, t := range traffic {
		path := fmt.Sprintf("spec.traffic[%d]", i)
		if t.Percent != nil {
			if *t.Percent < 0 || *t.Percent > 100 {
				errs = append(errs, fmt.Errorf("%s.percent: must be between 0 and 100, got %d", path, *t.Percent))
			}
			sum += *t.Percent
		}
		if t.Tag != "" {
			if msgs := validation.IsDNS1035Label(t.Tag); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s.tag: %q is not a valid tag: %s", path, t.Tag, strings.Join(msgs, "; ")))
			}
			if j, dup := tags[t.Tag]; dup {
				errs = append(errs, fmt.Errorf("%s.tag: %q is already used by spec.traffic[%d]; tags must be unique", path, t.Tag, j))
			}
			tags[t.Tag] = i
		}
		latest := t.LatestRevision != nil && *t.LatestRevision
		switch {
		case latest && t.RevisionName != "":
			errs = append(errs, fmt.Errorf("%s.revisionName: must be empty when latestRevision is true, got %q", path, t.RevisionName))
		case t.LatestRevision != nil && !latest && t.RevisionName == "":
			errs = append(errs, fmt.Errorf("%s.revisionName: is required when latestRevision is false", path))
		case !latest && t.RevisionName == "" && t.ConfigurationName == "":
			errs = append(errs, fmt.Errorf("%s: names no revision; set revisionName or latestRevision", path))
		}
		if t.RevisionName != "" && t.ConfigurationName != "" {
			errs = append(errs, fmt.Errorf("%s: set revisionName or configurationName, not both", path))
		}
		if kind == KindService && t.ConfigurationName != "" {
			errs = append(errs, fmt.Errorf("%s.configurationName: a Service's traffic may not name a Configuration, got %q", path, t.ConfigurationName))
		}
		if kind == KindRoute && latest && t.ConfigurationName == "" {
			errs = append(errs, fmt.Errorf("%s.configurationName: a Route target with latestRevision needs a configurationName", path))
		}
	}
	if sum != 100 {
		errs = append(errs, fmt.Errorf("spec.traffic: percents must sum to 100, got %d", sum))
	}
	return errors.Join(errs...)
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
