package api

import (
	"strings"

	"github.com/sluicehq/sluice/knative"
)

// RolloutID is the one workflow ID per target: at most one rollout of a
// target runs at a time.
func RolloutID(t knative.TargetRef) string {
	id := "rollout/"
	if t.Cluster != "" {
		// Clusters sharing a Temporal namespace each have their own rollouts.
		id += t.Cluster + "/"
	}
	return id + t.Namespace + "/" + strings.ToLower(t.Kind) + "/" + t.Name
}

// WaveID is the wave workflow of a release of a target; the target carries
// no cluster, as the wave spans them.
func WaveID(t knative.TargetRef, release string) string {
	return "wave/" + t.Namespace + "/" + strings.ToLower(t.Kind) + "/" + t.Name + "/" + release
}
