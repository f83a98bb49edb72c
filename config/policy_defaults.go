package config

import "time"

// Defaults are the policy values used where a target's annotations are silent.
// The worker reads them from its settings, so a platform team sets them once.
type Defaults struct {
	Steps            []int64       `json:"steps"`
	Hold             time.Duration `json:"hold"`
	ProgressDeadline time.Duration `json:"progressDeadline"`
	VerifyTimeout    time.Duration `json:"verifyTimeout"`
	Deadline         time.Duration `json:"deadline"`
	// PrometheusURL is the Prometheus HTTP API that analysis checks query
	// when their document names none.
	PrometheusURL string `json:"prometheusURL,omitempty"`
	// KnativeMetrics names the queue-proxy metrics built-in checks query
	// when their document does not say (MetricsOpenTelemetry if empty).
	KnativeMetrics string `json:"knativeMetrics,omitempty"`
}

// BuiltinDefaults are the defaults when the worker's settings set none: a
// cautious four-step ramp that a typical Revision finishes in a few minutes.
func BuiltinDefaults() Defaults {
	return Defaults{
		Steps:            []int64{10, 25, 50, 100},
		Hold:             time.Minute,
		ProgressDeadline: 10 * time.Minute,
		VerifyTimeout:    2 * time.Minute,
		Deadline:         2 * time.Hour,
	}
}
