// Package api is sluice's contract with its workflows: every name a caller
// or a worker uses to reach them (workflow types, task queues, signals,
// updates, queries, activities), the IDs of the workflows, and the payloads
// they take, answer and send each other.
//
// A rollout that is running holds these names and payloads in its history,
// so they change only with intent: a renamed name or JSON field strands the
// rollouts already running (see docs/operations.md on upgrades). The
// workflows package implements the contract; activities, control, the
// receiver, the CLI and the report use it.
package api
