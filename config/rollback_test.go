package config

import (
	"strings"
	"testing"
	"time"
)

func TestRollbackWindow(t *testing.T) {
	p, err := FromAnnotations(map[string]string{AnnotationRollbackWindow: "24h"}, BuiltinDefaults())
	if err != nil || p.RollbackWindow != 24*time.Hour {
		t.Fatalf("24h: %v, %v", p.RollbackWindow, err)
	}
	if p, _ := FromAnnotations(map[string]string{}, BuiltinDefaults()); p.RollbackWindow != 0 {
		t.Errorf("no annotation: window %s, want none", p.RollbackWindow)
	}
	for raw, want := range map[string]string{
		"7d":    "write 168h for 7d",
		"-1h":   "must be positive",
		"0s":    "must be positive",
		"a day": "is not a duration",
	} {
		_, err := FromAnnotations(map[string]string{AnnotationRollbackWindow: raw}, BuiltinDefaults())
		if err == nil || !strings.Contains(err.Error(), AnnotationRollbackWindow) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", raw, err, want)
		}
	}
	if _, err := FromAnnotations(map[string]string{"sluice.dev/rollback-windw": "1h"}, BuiltinDefaults()); err == nil || !strings.Contains(err.Error(), "did you mean "+AnnotationRollbackWindow) {
		t.Errorf("a misspelt window: %v", err)
	}
}

func TestStableHistory(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 16, 0, 0, 0, time.UTC)
	h := WithStint(nil, Stint{Revision: "hello-00001", Until: t0})
	h = WithStint(h, Stint{Revision: "hello-00002", Until: t0.Add(time.Hour)})
	h = WithStint(h, Stint{Revision: "hello-00001", Until: t0.Add(2 * time.Hour)})
	v := FormatStableHistory(h)
	if want := "hello-00001@2026-12-06T18:00:00Z,hello-00002@2026-12-06T17:00:00Z"; v != want {
		t.Fatalf("history = %s, want %s (newest first, one entry per Revision)", v, want)
	}
	if again := FormatStableHistory(WithStint(ParseStableHistory(v), h[0])); again != v {
		t.Errorf("the same stint again changed the history: %s", again)
	}
	if got := ParseStableHistory("hello-00003@yesterday, ,hello-00002@2026-12-06T17:00:00Z,@2026-12-06T17:00:00Z"); len(got) != 1 || got[0].Revision != "hello-00002" {
		t.Errorf("entries it cannot read must be skipped, the rest kept: %+v", got)
	}
	if got := ParseStableHistory("hello-00001@2026-12-06T16:00:00Z,hello-00002@2026-12-06T17:00:00Z"); len(got) != 2 || got[0].Revision != "hello-00002" {
		t.Errorf("a hand-edited history must read newest first: %+v", got)
	}
	for i := range 2 * StableHistoryLength {
		h = WithStint(h, Stint{Revision: "r" + string(rune('a'+i)), Until: t0.Add(time.Duration(3+i) * time.Hour)})
	}
	if len(h) != StableHistoryLength || h[0].Revision != "r"+string(rune('a'+2*StableHistoryLength-1)) {
		t.Errorf("history keeps %d entries, newest first: %+v", StableHistoryLength, h)
	}
}

func TestWrittenBySluice(t *testing.T) {
	for key, want := range map[string]bool{AnnotationEnded: true, AnnotationStableHistory: true, AnnotationTemplateScale: true, AnnotationSteps: false, AnnotationRollbackWindow: false, "sluice.dev/nope": false} {
		if WrittenBySluice(key) != want {
			t.Errorf("WrittenBySluice(%s) = %v", key, !want)
		}
	}
}

func TestPreviewTag(t *testing.T) {
	p, err := FromAnnotations(map[string]string{AnnotationPreview: "preview"}, BuiltinDefaults())
	if err != nil || p.Preview != "preview" {
		t.Fatalf("preview: %q, %v", p.Preview, err)
	}
	for _, raw := range []string{"Preview", "1st", "pre_view", ""} {
		_, err := FromAnnotations(map[string]string{AnnotationPreview: raw}, BuiltinDefaults())
		if err == nil || !strings.Contains(err.Error(), AnnotationPreview+": must be a tag for the candidate") {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

func TestPreviewHold(t *testing.T) {
	an := "webhooks:\n  - {name: soak, at: hold, url: http://soak/}\n"
	p, err := FromAnnotations(map[string]string{AnnotationPreview: "canary", AnnotationPreviewHold: "5m", AnnotationAnalysis: an}, BuiltinDefaults())
	if err != nil || p.PreviewHold != 5*time.Minute {
		t.Fatalf("preview hold: %s, %v", p.PreviewHold, err)
	}
	for _, c := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{AnnotationPreviewHold: "5m", AnnotationAnalysis: an}, "gives the candidate no preview tag"},
		{map[string]string{AnnotationPreview: "canary", AnnotationPreviewHold: "5m"}, "the policy has none"},
		{map[string]string{AnnotationPreview: "canary", AnnotationPreviewHold: "5m", AnnotationAnalysis: an, AnnotationCapacity: "availability"}, "cannot be combined with sluice.dev/capacity"},
		{map[string]string{AnnotationPreview: "canary", AnnotationPreviewHold: "3h", AnnotationAnalysis: an}, "must be longer than the sum of all holds (3h3m0s)"},
	} {
		if _, err := FromAnnotations(c.ann, BuiltinDefaults()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.ann, err, c.want)
		}
	}
}
