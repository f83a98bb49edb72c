package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// OptedIn reports whether the annotations opt a target into sluice rollouts.
// A value that is neither on nor off is an error, so a typo does not silently
// switch rollouts off.
func OptedIn(annotations map[string]string) (bool, error) {
	v, ok := annotations[AnnotationRollout]
	if !ok {
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "enabled", "true":
		return true, nil
	case "disabled", "false", "":
		return false, nil
	}
	return false, &FieldError{Key: AnnotationRollout, Message: `must be "enabled" or "disabled"`, Value: v}
}

// FromAnnotations reads a rollout policy from a target's annotations, taking
// what they do not say from d. It reports every problem at once, each naming
// its annotation, so one edit can fix them all.
func FromAnnotations(annotations map[string]string, d Defaults) (Policy, error) {
	p, errs, _ := parsePolicy(annotations, d)
	if len(errs) > 0 {
		return Policy{}, errors.Join(errs...)
	}
	return p, nil
}

// parsePolicy reads a policy and says what is wrong with it (errs) and what
// in it has no effect (warns).
func parsePolicy(annotations map[string]string, d Defaults) (Policy, []error, []error) {
	errs := unknownKeys(annotations)
	var warns []error
	fail := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	weights := d.Steps
	if raw, ok := annotations[AnnotationSteps]; ok {
		w, err := parseWeights(AnnotationSteps, raw)
		fail(err)
		if err == nil {
			fail(validateSteps(AnnotationSteps, raw, w))
			weights = w
		}
	} else {
		fail(validateSteps("default steps", formatWeights(weights), weights))
	}

	hold := durationOr(annotations, AnnotationHold, d.Hold, true, fail)
	p := Policy{
		ProgressDeadline: durationOr(annotations, AnnotationProgressDeadline, d.ProgressDeadline, false, fail),
		VerifyTimeout:    durationOr(annotations, AnnotationVerifyTimeout, d.VerifyTimeout, false, fail),
		Deadline:         durationOr(annotations, AnnotationDeadline, d.Deadline, false, fail),
	}
	p.Steps = make([]Step, len(weights))
	for i, w := range weights {
		p.Steps[i] = Step{Weight: w, Hold: hold}
	}

	if raw, ok := annotations[AnnotationStepHolds]; ok {
		fail(applyStepHolds(raw, p.Steps))
		if w := lastStepHold(raw, p.Steps); w != nil {
			warns = append(warns, w)
		}
	}
	if raw, ok := annotations[AnnotationGates]; ok {
		err := applyGates(raw, p.Steps)
		fail(err)
		if err == nil {
			warns = append(warns, repeatedGates(raw)...)
		}
	}
	if raw, ok := annotations[AnnotationHold]; ok && len(p.Steps) == 1 {
		warns = append(warns, &FieldError{Key: AnnotationHold, Value: raw,
			Message: "has no effect: the only step, 100%, ends the rollout and never holds; remove it or add earlier steps"})
	}
	if raw, ok := annotations[AnnotationAnalysis]; ok {
		an, err := parseAnalysis(raw, d)
		fail(err)
		p.Analysis = an
	}
	p.Capacity = parseCapacity(annotations, fail)
	if raw, ok := annotations[AnnotationWaves]; ok {
		w, err := parseWaves(raw)
		fail(err)
		p.Waves = w
	}
	p.RollbackWindow = parseRollbackWindow(annotations, fail)
	p.Preview = parsePreview(annotations, fail)
	p.AnalysisTemplate = parseTemplateRef(annotations, fail)
	p.PreviewHold = parsePreviewHold(annotations, p, fail)
	if len(errs) == 0 && p.TotalHold()+p.PreviewHold >= p.Deadline {
		key := AnnotationDeadline
		if _, ok := annotations[key]; !ok {
			key += " (default)"
		}
		errs = append(errs, &FieldError{
			Key:     key,
			Message: fmt.Sprintf("must be longer than the sum of all holds (%s), or the rollout can never finish; raise it or shorten the holds", p.TotalHold()+p.PreviewHold),
			Value:   p.Deadline.String(),
		})
	}
	if len(errs) > 0 {
		return Policy{}, errs, warns
	}
	return p, nil, warns
}

func parseWeights(key, raw string) ([]int64, error) {
	parts := SplitList(raw)
	if len(parts) == 0 {
		return nil, &FieldError{Key: key, Message: `must list traffic weights ending at 100, e.g. "10,50,100"`, Value: raw}
	}
	weights := make([]int64, 0, len(parts))
	for _, part := range parts {
		w, err := strconv.ParseInt(strings.TrimSuffix(part, "%"), 10, 64)
		if err != nil {
			return nil, &FieldError{Key: key, Message: fmt.Sprintf("%q is not a whole number; list weights like \"10,50,100\"", part), Value: raw}
		}
		weights = append(weights, w)
	}
	return weights, nil
}

// durationOr parses a duration annotation or returns def. Holds may be zero;
// deadlines and timeouts must be positive.
func durationOr(annotations map[string]string, key string, def time.Duration, zeroOK bool, fail func(error)) time.Duration {
	raw, ok := annotations[key]
	if !ok {
		return def
	}
	d, err := parseDuration(key, raw, zeroOK)
	if err != nil {
		fail(err)
		return def
	}
	return d
}

func parseDuration(key, raw string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(raw))
	if err != nil {
		msg := `is not a duration; write it like "90s", "5m" or "1h30m"`
		if n, numErr := strconv.ParseFloat(strings.TrimSpace(raw), 64); numErr == nil {
			msg = fmt.Sprintf("has no unit; write %gs for seconds or %gm for minutes", n, n)
		}
		return 0, &FieldError{Key: key, Message: msg, Value: raw}
	}
	if d < 0 || (d == 0 && !zeroOK) {
		want := "must be positive"
		if zeroOK {
			want = "must not be negative"
		}
		return 0, &FieldError{Key: key, Message: want, Value: raw}
	}
	return d, nil
}

func applyStepHolds(raw string, steps []Step) error {
	parts := SplitList(raw)
	if len(parts) == 0 {
		return &FieldError{Key: AnnotationStepHolds, Message: `must map step weights to holds, e.g. "50=10m,100=0s"`, Value: raw}
	}
	seen := map[int64]bool{}
	for _, part := range parts {
		weightText, holdText, ok := strings.Cut(part, "=")
		if !ok {
			return &FieldError{Key: AnnotationStepHolds, Message: fmt.Sprintf("%q is not weight=duration, e.g. \"50=10m\"", part), Value: raw}
		}
		w, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(weightText), "%"), 10, 64)
		if err != nil {
			return &FieldError{Key: AnnotationStepHolds, Message: fmt.Sprintf("%q is not a whole-number weight", weightText), Value: raw}
		}
		i := stepIndex(steps, w)
		if i < 0 {
			return &FieldError{Key: AnnotationStepHolds, Message: fmt.Sprintf("weight %d is not one of the steps %s; use a weight from %s", w, formatStepWeights(steps), AnnotationSteps), Value: raw}
		}
		if seen[w] {
			return &FieldError{Key: AnnotationStepHolds, Message: fmt.Sprintf("weight %d is given twice; keep one", w), Value: raw}
		}
		seen[w] = true
		d, err := parseDuration(AnnotationStepHolds, holdText, true)
		if err != nil {
			return &FieldError{Key: AnnotationStepHolds, Message: fmt.Sprintf("hold %q of weight %d is not a duration of zero or more, e.g. \"10m\"", holdText, w), Value: raw}
		}
		steps[i].Hold = d
	}
	return nil
}

func applyGates(raw string, steps []Step) error {
	weights, err := parseWeights(AnnotationGates, raw)
	if err != nil {
		return err
	}
	for _, w := range weights {
		i := stepIndex(steps, w)
		if i < 0 {
			return &FieldError{Key: AnnotationGates, Message: fmt.Sprintf("weight %d is not one of the steps %s; gate a weight from %s", w, formatStepWeights(steps), AnnotationSteps), Value: raw}
		}
		steps[i].Gate = true
	}
	return nil
}

// lastStepHold warns of a hold given to the last step: reaching 100% ends
// the rollout, so that hold is never waited.
func lastStepHold(raw string, steps []Step) error {
	if len(steps) == 0 {
		return nil
	}
	last := steps[len(steps)-1].Weight
	for _, part := range SplitList(raw) {
		weightText, _, _ := strings.Cut(part, "=")
		if w, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(weightText), "%"), 10, 64); err == nil && w == last {
			return &FieldError{Key: AnnotationStepHolds, Value: raw, Message: fmt.Sprintf(
				"the hold of %d%% has no effect: the last step ends the rollout and never holds; remove %q", last, part)}
		}
	}
	return nil
}

// repeatedGates warns of a weight gated twice: one promote passes it.
func repeatedGates(raw string) []error {
	weights, _ := parseWeights(AnnotationGates, raw)
	seen := map[int64]bool{}
	var warns []error
	for _, w := range weights {
		if seen[w] {
			warns = append(warns, &FieldError{Key: AnnotationGates, Value: raw,
				Message: fmt.Sprintf("weight %d is gated twice, and one promote passes it; list it once", w)})
		}
		seen[w] = true
	}
	return warns
}

func stepIndex(steps []Step, weight int64) int {
	for i, s := range steps {
		if s.Weight == weight {
			return i
		}
	}
	return -1
}

// SplitList splits a comma-separated list, trimming each item and dropping empty ones.
func SplitList(raw string) []string {
	var out []string
	for _, p := range strings.Split(raw, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func formatWeights(weights []int64) string {
	parts := make([]string, len(weights))
	for i, w := range weights {
		parts[i] = strconv.FormatInt(w, 10)
	}
	return strings.Join(parts, ",")
}

func formatStepWeights(steps []Step) string {
	weights := make([]int64, len(steps))
	for i, s := range steps {
		weights[i] = s.Weight
	}
	return formatWeights(weights)
}
