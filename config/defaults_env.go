package config

import (
	"fmt"
	"strings"
	"time"
)

// The worker's environment sets the defaults of every policy: a target's
// annotations override them.
const (
	EnvSteps            = "SLUICE_DEFAULT_STEPS"
	EnvHold             = "SLUICE_DEFAULT_HOLD"
	EnvProgressDeadline = "SLUICE_DEFAULT_PROGRESS_DEADLINE"
	EnvVerifyTimeout    = "SLUICE_DEFAULT_VERIFY_TIMEOUT"
	EnvDeadline         = "SLUICE_DEFAULT_DEADLINE"
	EnvPrometheusURL    = "SLUICE_PROMETHEUS_URL"
	EnvKnativeMetrics   = "SLUICE_KNATIVE_METRICS"
)

// LoadDefaults reads the policy defaults through get, which gives a
// variable's trimmed value and whether it is set. Every invalid value is an
// error naming its variable; the built-in default stays in its place.
func LoadDefaults(get func(string) (string, bool)) (Defaults, []error) {
	s := struct{ Defaults Defaults }{BuiltinDefaults()}
	var errs []error
	if v, ok := get(EnvPrometheusURL); ok {
		if err := CheckURL(v); err != nil {
			errs = append(errs, &FieldError{Key: EnvPrometheusURL, Message: err.Error(), Value: v})
		} else {
			s.Defaults.PrometheusURL = v
		}
	}
	if v, ok := get(EnvKnativeMetrics); ok {
		if _, known := flavours[v]; !known {
			errs = append(errs, &FieldError{Key: EnvKnativeMetrics, Message: "must be one of " + strings.Join(KnativeMetrics(), ", "), Value: v})
		} else {
			s.Defaults.KnativeMetrics = v
		}
	}
	if v, ok := get(EnvSteps); ok {
		w, err := parseWeights(EnvSteps, v)
		if err == nil {
			err = validateSteps(EnvSteps, v, w)
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			s.Defaults.Steps = w
		}
	}
	for _, d := range []struct {
		key    string
		into   *time.Duration
		zeroOK bool
	}{
		{EnvHold, &s.Defaults.Hold, true},
		{EnvProgressDeadline, &s.Defaults.ProgressDeadline, false},
		{EnvVerifyTimeout, &s.Defaults.VerifyTimeout, false},
		{EnvDeadline, &s.Defaults.Deadline, false},
	} {
		if v, ok := get(d.key); ok {
			parsed, err := parseDuration(d.key, v, d.zeroOK)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			*d.into = parsed
		}
	}
	if len(errs) == 0 {
		if _, err := FromAnnotations(nil, s.Defaults); err != nil {
			errs = append(errs, fmt.Errorf("the default policy from SLUICE_DEFAULT_* is invalid: %w", err))
		}
	}
	return s.Defaults, errs
}
