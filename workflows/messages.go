// Package workflows holds the Rollout workflow — one durable workflow per
// rollout target that walks a candidate Revision through its policy's traffic
// steps — and the wave workflow that coordinates a release across clusters.
// They implement the contract in package api: its names, payloads and the
// status views they answer queries with.
//
// Everything here is deterministic: decisions are plain Go over the workflow's
// state, time comes from workflow.Now, and every side effect is an activity.
package workflows

import "github.com/sluicehq/sluice/api"

// RunInput is what a run of the Rollout workflow takes: the Input a caller
// starts it with and, when it continues as new, the state it resumes from.
// Embedding keeps one JSON object, as callers send it.
type RunInput struct {
	api.Input
	Carry *state `json:"carry,omitempty"`
}
