// Package settings reads the settings of sluice's processes — the worker's task
// queue, cluster, address and sizing, the receiver's and its admission
// webhooks' — from their environment. Invalid values are errors that name the
// variable. The defaults of every rollout policy are config's.
package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
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
	Defaults config.Defaults
	// Sizing of the Temporal worker (docs/operations.md says how to choose).
	Sizing WorkerSizing
	// Profiling serves Go's profiles (/debug/pprof/) beside /metrics.
	Profiling bool
	// WorkflowChanges is which of this release's workflow changes new
	// rollouts take: ChangesCompatible, only those the previous release can
	// replay, so workers can be rolled back under running rollouts; or
	// ChangesAll, once no rollback below this release is wanted.
	WorkflowChanges string
}

// The values of SLUICE_WORKFLOW_CHANGES.
const (
	ChangesCompatible = "compatible"
	ChangesAll        = "all"
)

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
	EnvCluster         = "SLUICE_CLUSTER"
	EnvTaskQueue       = "SLUICE_TASK_QUEUE"
	EnvHTTPAddr        = "SLUICE_HTTP_ADDR"
	EnvKubeconfig      = "KUBECONFIG"
	EnvWorkflowPollers = "SLUICE_WORKFLOW_POLLERS"
	EnvActivityPollers = "SLUICE_ACTIVITY_POLLERS"
	EnvMaxActivities   = "SLUICE_MAX_ACTIVITIES"
	EnvWorkflowChanges = "SLUICE_WORKFLOW_CHANGES"
	EnvPprof           = "SLUICE_PPROF"
)

// LoadProfiling reads SLUICE_PPROF, which the worker and the receiver share:
// true serves Go's runtime profiles on their HTTP address, for finding where
// CPU and memory go under load. Off by default: a profile shows the
// process's internals to whoever can reach that address.
func LoadProfiling(get func(string) (string, bool)) (bool, error) {
	v, ok := get(EnvPprof)
	if !ok || strings.TrimSpace(v) == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, &config.FieldError{Key: EnvPprof, Value: v, Message: "must be true or false"}
	}
	return b, nil
}

// DefaultSizing suits a worker running up to 5,000 rollouts at once: the
// SDK's workflow cache (10,000) holds them all, and each may run its two
// activities (1,000 slots, the SDK's default, fit 500 such rollouts while
// the cache held 10,000; docs/operations.md). A slot costs nothing until an
// activity runs in it.
var DefaultSizing = WorkerSizing{WorkflowPollers: 8, ActivityPollers: 8, MaxActivities: 10000}

// LoadSettings reads settings through lookup (os.LookupEnv in production).
// Invalid values are errors that name the variable, never silently ignored.
func LoadSettings(lookup func(string) (string, bool)) (Settings, error) {
	s := Settings{TaskQueue: api.DefaultTaskQueue, HTTPAddr: ":9090", Defaults: config.BuiltinDefaults(), Sizing: DefaultSizing,
		WorkflowChanges: ChangesCompatible}
	get := func(key string) (string, bool) {
		v, ok := lookup(key)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	if v, ok := get(EnvCluster); ok {
		if err := config.ValidateCluster(v); err != nil {
			return s, fmt.Errorf("%s: %w", EnvCluster, err)
		}
		s.Cluster, s.TaskQueue = v, api.ClusterTaskQueue(v)
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
	d, errs := config.LoadDefaults(get)
	s.Defaults = d
	var err error
	if s.Profiling, err = LoadProfiling(get); err != nil {
		errs = append(errs, err)
	}
	if v, ok := get(EnvWorkflowChanges); ok {
		switch v {
		case ChangesCompatible, ChangesAll:
			s.WorkflowChanges = v
		default:
			errs = append(errs, &config.FieldError{Key: EnvWorkflowChanges, Value: v,
				Message: `must be "compatible" (new rollouts take only the workflow changes the previous release can replay, so a rollback stays open) or "all" (every change of this release)`})
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
				errs = append(errs, &config.FieldError{Key: n.key, Message: "must be a whole number of at least 1", Value: v})
				continue
			}
			*n.into = i
		}
	}
	if s.Sizing.WorkflowPollers < 2 {
		// The SDK needs two workflow pollers: one on the sticky queue, one
		// on the shared one.
		errs = append(errs, &config.FieldError{Key: EnvWorkflowPollers, Message: "must be at least 2 (one for the worker's sticky queue, one for the shared queue)", Value: strconv.Itoa(s.Sizing.WorkflowPollers)})
	}
	return s, errors.Join(errs...)
}
