package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Settings are the worker's runtime settings. They come from the
// environment (SLUICE_*), so the same binary runs from a shell, a test and a
// Deployment. Temporal's own connection settings (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TLS, API key) follow the Temporal SDK's environment
// conventions and are read by the worker package.
type Settings struct {
	// Cluster names the cluster this process serves, when several share one
	// Temporal namespace: it scopes the rollouts' workflow IDs, and the
	// default task queue becomes sluice-rollouts-<cluster>.
	Cluster string
	// TaskQueue is the Temporal task queue rollouts run on.
	TaskQueue string
	// HTTPAddr serves /healthz, /readyz and /metrics.
	HTTPAddr string
	// Kubeconfig is a kubeconfig file; empty means in-cluster, then ~/.kube/config.
	Kubeconfig string
	// Defaults fill in what a target's annotations leave out.
	Defaults Defaults
	// Sizing of the Temporal worker (docs/operations.md says how to choose).
	Sizing WorkerSizing
}

// WorkerSizing is how much work one worker process takes from Temporal at a
// time.
type WorkerSizing struct {
	// WorkflowPollers and ActivityPollers are how many long polls the
	// worker keeps open on its task queue for each kind of task: each poll
	// brings one task at a time.
	WorkflowPollers, ActivityPollers int
	// MaxActivities is how many activities may run at once. A rollout
	// holds at most two (a watch, and a progress event or a check).
	MaxActivities int
}

// Environment variable names.
const (
	EnvCluster          = "SLUICE_CLUSTER"
	EnvTaskQueue        = "SLUICE_TASK_QUEUE"
	EnvHTTPAddr         = "SLUICE_HTTP_ADDR"
	EnvKubeconfig       = "KUBECONFIG"
	EnvSteps            = "SLUICE_DEFAULT_STEPS"
	EnvHold             = "SLUICE_DEFAULT_HOLD"
	EnvProgressDeadline = "SLUICE_DEFAULT_PROGRESS_DEADLINE"
	EnvVerifyTimeout    = "SLUICE_DEFAULT_VERIFY_TIMEOUT"
	EnvDeadline         = "SLUICE_DEFAULT_DEADLINE"
	EnvPrometheusURL    = "SLUICE_PROMETHEUS_URL"
	EnvKnativeMetrics   = "SLUICE_KNATIVE_METRICS"
	EnvWorkflowPollers  = "SLUICE_WORKFLOW_POLLERS"
	EnvActivityPollers  = "SLUICE_ACTIVITY_POLLERS"
	EnvMaxActivities    = "SLUICE_MAX_ACTIVITIES"
)

// DefaultSizing suits a worker running up to a few hundred rollouts at once
// (docs/operations.md, from the measurements in docs/benchmarks.md).
var DefaultSizing = WorkerSizing{WorkflowPollers: 8, ActivityPollers: 8, MaxActivities: 1000}

// DefaultTaskQueue is where rollouts run unless SLUICE_TASK_QUEUE says otherwise.
const DefaultTaskQueue = "sluice-rollouts"

// ClusterTaskQueue is a cluster's default task queue: its worker polls it,
// and its receiver and the CLI start its rollouts there.
func ClusterTaskQueue(cluster string) string {
	if cluster == "" {
		return DefaultTaskQueue
	}
	return DefaultTaskQueue + "-" + cluster
}

// ValidateCluster checks a cluster name: a DNS label, as it becomes part of
// workflow IDs and task queue names.
func ValidateCluster(name string) error {
	if !nameRE.MatchString(name) || len(name) > 63 {
		return fmt.Errorf("cluster name %q must be lower-case letters, digits and dashes (a DNS label), e.g. \"eu-west-1\"", name)
	}
	return nil
}

// LoadSettings reads settings through lookup (os.LookupEnv in production).
// Invalid values are errors that name the variable, never silently ignored.
func LoadSettings(lookup func(string) (string, bool)) (Settings, error) {
	s := Settings{TaskQueue: DefaultTaskQueue, HTTPAddr: ":9090", Defaults: BuiltinDefaults(), Sizing: DefaultSizing}
	get := func(key string) (string, bool) {
		v, ok := lookup(key)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	if v, ok := get(EnvCluster); ok {
		if err := ValidateCluster(v); err != nil {
			return s, fmt.Errorf("%s: %w", EnvCluster, err)
		}
		s.Cluster, s.TaskQueue = v, ClusterTaskQueue(v)
	}
	if v, ok := get(EnvTaskQueue); ok {
		s.TaskQueue = v
	}
	if v, ok := get(EnvHTTPAddr); ok {
		s.HTTPAddr = v
	}
	if v, ok := get(EnvKubeconfig); ok {
		s.Kubeconfig = v
	}
	var errs []error
	if v, ok := get(EnvPrometheusURL); ok {
		if err := checkURL(v); err != nil {
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
	for _, n := range []struct {
		key  string
		into *int
	}{
		{EnvWorkflowPollers, &s.Sizing.WorkflowPollers},
		{EnvActivityPollers, &s.Sizing.ActivityPollers},
		{EnvMaxActivities, &s.Sizing.MaxActivities},
	} {
		if v, ok := get(n.key); ok {
			i, err := strconv.Atoi(v)
			if err != nil || i < 1 {
				errs = append(errs, &FieldError{Key: n.key, Message: "must be a whole number of at least 1", Value: v})
				continue
			}
			*n.into = i
		}
	}
	if s.Sizing.WorkflowPollers < 2 {
		// The SDK needs two workflow pollers: one on the sticky queue, one
		// on the shared one.
		errs = append(errs, &FieldError{Key: EnvWorkflowPollers, Message: "must be at least 2 (one for the worker's sticky queue, one for the shared queue)", Value: strconv.Itoa(s.Sizing.WorkflowPollers)})
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
	return s, errors.Join(errs...)
}
