// Package knative holds what sluice knows about Knative Serving's objects
// beyond what Knative's own packages provide.
package knative

import (
	"strconv"

	"knative.dev/serving/pkg/apis/serving"

	"github.com/sluicehq/sluice/config"
)

// RevisionLabels is what a Revision's labels say about it: its owners, which
// template of its Configuration it runs, and how a rollout of it ended.
type RevisionLabels struct {
	Configuration string
	// Service is empty for a Revision of a Configuration on its own.
	Service string
	// Generation is the Configuration generation the Revision was created
	// from (0 if the label is missing): the order of a Configuration's
	// Revisions.
	Generation int64
	// Outcome is sluice's label (config.LabelOutcome) on a candidate its
	// rollout rolled back or aborted; empty otherwise.
	Outcome string
}

// ReadRevisionLabels reads the labels Knative and sluice put on a Revision.
func ReadRevisionLabels(labels map[string]string) RevisionLabels {
	g, err := strconv.ParseInt(labels[serving.ConfigurationGenerationLabelKey], 10, 64)
	if err != nil {
		g = 0
	}
	return RevisionLabels{
		Configuration: labels[serving.ConfigurationLabelKey],
		Service:       labels[serving.ServiceLabelKey],
		Generation:    g,
		Outcome:       labels[config.LabelOutcome],
	}
}
