package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOptedIn(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    bool
		wantErr string
	}{
		{name: "absent", ann: nil, want: false},
		{name: "enabled", ann: map[string]string{AnnotationRollout: "enabled"}, want: true},
		{name: "true, any case", ann: map[string]string{AnnotationRollout: " True "}, want: true},
		{name: "disabled", ann: map[string]string{AnnotationRollout: "disabled"}, want: false},
		{name: "typo", ann: map[string]string{AnnotationRollout: "enabeld"}, wantErr: `sluice.dev/rollout: must be "enabled" or "disabled", got "enabeld"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := OptedIn(tt.ann)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("OptedIn() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("OptedIn() = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestFromAnnotations(t *testing.T) {
	d := Defaults{
		Steps:            []int64{20, 100},
		Hold:             time.Minute,
		ProgressDeadline: 5 * time.Minute,
		VerifyTimeout:    time.Minute,
		Deadline:         time.Hour,
	}
	tests := []struct {
		name string
		ann  map[string]string
		want Policy
	}{{
		name: "defaults only",
		ann:  nil,
		want: Policy{
			Steps:            []Step{{Weight: 20, Hold: time.Minute}, {Weight: 100, Hold: time.Minute}},
			ProgressDeadline: 5 * time.Minute, VerifyTimeout: time.Minute, Deadline: time.Hour,
		},
	}, {
		name: "everything set",
		ann: map[string]string{
			AnnotationSteps:            "5, 25%,50,100",
			AnnotationHold:             "30s",
			AnnotationStepHolds:        "50=10m,100=0s",
			AnnotationGates:            "50,100",
			AnnotationProgressDeadline: "90s",
			AnnotationVerifyTimeout:    "20s",
			AnnotationDeadline:         "1h30m",
		},
		want: Policy{
			Steps: []Step{
				{Weight: 5, Hold: 30 * time.Second},
				{Weight: 25, Hold: 30 * time.Second},
				{Weight: 50, Hold: 10 * time.Minute, Gate: true},
				{Weight: 100, Hold: 0, Gate: true},
			},
			ProgressDeadline: 90 * time.Second, VerifyTimeout: 20 * time.Second, Deadline: 90 * time.Minute,
		},
	}, {
		name: "single step straight to 100",
		ann:  map[string]string{AnnotationSteps: "100", AnnotationHold: "0s"},
		want: Policy{
			Steps:            []Step{{Weight: 100}},
			ProgressDeadline: 5 * time.Minute, VerifyTimeout: time.Minute, Deadline: time.Hour,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromAnnotations(tt.ann, d)
			if err != nil {
				t.Fatalf("FromAnnotations() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("FromAnnotations() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestFromAnnotationsErrors(t *testing.T) {
	d := BuiltinDefaults()
	tests := []struct {
		name string
		ann  map[string]string
		want []string // every line must appear in the error
	}{
		{name: "decreasing", ann: map[string]string{AnnotationSteps: "50,20"},
			want: []string{`sluice.dev/steps: weights must increase and end at 100, got "50,20"`}},
		{name: "not ending at 100", ann: map[string]string{AnnotationSteps: "10,50"},
			want: []string{`sluice.dev/steps: weights must increase and end at 100, got "10,50"`}},
		{name: "repeated weight", ann: map[string]string{AnnotationSteps: "10,10,100"},
			want: []string{`sluice.dev/steps: weights must increase`}},
		{name: "zero weight", ann: map[string]string{AnnotationSteps: "0,100"},
			want: []string{`sluice.dev/steps: weight 0 is out of range; each weight must be between 1 and 100, got "0,100"`}},
		{name: "over 100", ann: map[string]string{AnnotationSteps: "50,150"},
			want: []string{`weight 150 is out of range`}},
		{name: "garbage steps", ann: map[string]string{AnnotationSteps: "ten,100"},
			want: []string{`sluice.dev/steps: "ten" is not a whole number`}},
		{name: "empty steps", ann: map[string]string{AnnotationSteps: " , "},
			want: []string{`sluice.dev/steps: must list traffic weights ending at 100`}},
		{name: "too many steps", ann: map[string]string{AnnotationSteps: "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,100"},
			want: []string{`has 21 steps, at most 20`}},
		{name: "garbage hold", ann: map[string]string{AnnotationHold: "five minutes"},
			want: []string{`sluice.dev/hold: is not a duration; write it like "90s", "5m" or "1h30m", got "five minutes"`}},
		{name: "negative hold", ann: map[string]string{AnnotationHold: "-1m"},
			want: []string{`sluice.dev/hold: must not be negative, got "-1m"`}},
		{name: "zero deadline", ann: map[string]string{AnnotationProgressDeadline: "0s"},
			want: []string{`sluice.dev/progress-deadline: must be positive, got "0s"`}},
		{name: "bad verify timeout", ann: map[string]string{AnnotationVerifyTimeout: "1 m"},
			want: []string{`sluice.dev/verify-timeout: is not a duration`}},
		{name: "step hold for unknown weight", ann: map[string]string{AnnotationSteps: "10,100", AnnotationStepHolds: "50=1m"},
			want: []string{`sluice.dev/step-holds: weight 50 is not one of the steps 10,100; use a weight from sluice.dev/steps, got "50=1m"`}},
		{name: "step hold without =", ann: map[string]string{AnnotationStepHolds: "50:1m"},
			want: []string{`sluice.dev/step-holds: "50:1m" is not weight=duration`}},
		{name: "step hold bad duration", ann: map[string]string{AnnotationStepHolds: "50=soon"},
			want: []string{`sluice.dev/step-holds: hold "soon" of weight 50 is not a duration`}},
		{name: "step hold twice", ann: map[string]string{AnnotationStepHolds: "50=1m,50=2m"},
			want: []string{`weight 50 is given twice`}},
		{name: "gate on unknown weight", ann: map[string]string{AnnotationGates: "75"},
			want: []string{`sluice.dev/gates: weight 75 is not one of the steps 10,25,50,100`}},
		{name: "deadline shorter than holds", ann: map[string]string{AnnotationHold: "20m", AnnotationDeadline: "1h"},
			want: []string{`sluice.dev/deadline: must be longer than the sum of all holds (1h0m0s)`}},
		{name: "several problems reported together",
			ann:  map[string]string{AnnotationSteps: "50,20", AnnotationHold: "x", AnnotationDeadline: "-5m"},
			want: []string{`sluice.dev/steps: weights must increase`, `sluice.dev/hold: is not a duration`, `sluice.dev/deadline: must be positive`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromAnnotations(tt.ann, d)
			if err == nil {
				t.Fatalf("FromAnnotations(%v) succeeded, want an error", tt.ann)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestBuiltinDefaultsAreValid(t *testing.T) {
	if _, err := FromAnnotations(nil, BuiltinDefaults()); err != nil {
		t.Fatalf("built-in defaults are invalid: %v", err)
	}
}

func TestEndedOutcome(t *testing.T) {
	v := Ended("hello-00004", "RolledBack")
	for _, tc := range []struct{ value, revision, want string }{
		{v, "hello-00004", "RolledBack"},
		{v, "hello-00005", ""},
		{v, "hello-0000", ""},
		{"", "hello-00004", ""},
		{"hello-00004", "hello-00004", ""},
	} {
		if got := EndedOutcome(tc.value, tc.revision); got != tc.want {
			t.Errorf("EndedOutcome(%q, %q) = %q, want %q", tc.value, tc.revision, got, tc.want)
		}
	}
}

func TestWavePlans(t *testing.T) {
	p, err := FromAnnotations(map[string]string{AnnotationWaves: `
waves:
  - clusters: [staging]
    soak: 10m
  - clusters: [canary-eu]
    soak: 1h
    gate: true
  - clusters: [prod-us, prod-eu]
onFailure: rollback
`}, BuiltinDefaults())
	if err != nil {
		t.Fatal(err)
	}
	w := p.Waves
	if len(w.Waves) != 3 || w.Waves[0].Soak != 10*time.Minute || w.Waves[2].Soak != 0 || !w.Waves[1].Gate || w.Waves[0].Gate || w.OnFailure != OnFailureRollback ||
		w.WaveOf("prod-eu") != 2 || w.WaveOf("nowhere") != -1 || strings.Join(w.Clusters(), ",") != "staging,canary-eu,prod-us,prod-eu" {
		t.Fatalf("plan = %+v", w)
	}
	for doc, want := range map[string]string{
		"waves: [{clusters: [a]}]":                                 "lists 1 waves; a plan needs at least two",
		"waves: [{clusters: [a]}, {clusters: [b, a]}]":             `cluster "a" is in wave 1 and wave 2`,
		"waves: [{clusters: [a]}, {clusters: []}]":                 "wave 2 lists no clusters",
		"waves: [{clusters: [A]}, {clusters: [b]}]":                `wave 1: cluster name "A" must be lower-case`,
		"waves: [{clusters: [a], soak: soon}, {clusters: [b]}]":    `wave 1: soak "soon" must be a duration`,
		"waves: [{clusters: [a]}, {clusters: [b]}]\nonFailure: go": `onFailure "go" must be stop`,
		"wave: [{clusters: [a]}]":                                  `unknown field "wave"`,
		"waves: [{clusters: [a]}, {clusters: [b], gate: true}]":    "wave 2: gate holds the next wave, and the last has none",
	} {
		if _, err := FromAnnotations(map[string]string{AnnotationWaves: doc}, BuiltinDefaults()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", doc, err, want)
		}
	}
}
