// Package config holds sluice's rollout policy — the annotations a service owner
// puts on a Knative Service or Configuration — and the worker's settings that
// supply its defaults.
//
// Files follow Knative's split: policy_types.go (what a policy is),
// policy_defaults.go (where unset fields come from), policy_parse.go (reading the
// annotations) and policy_validation.go (the rules, with messages that name the
// annotation and the fix).
package config
