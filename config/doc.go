// Package config holds sluice's rollout policy — the annotations a service owner
// puts on a Knative Service or Configuration — and its defaults, which the
// worker's environment may set (defaults_env.go; the processes' own settings
// are in package settings).
//
// Files follow Knative's split: policy_types.go (what a policy is),
// policy_defaults.go (where unset fields come from), policy_parse.go (reading the
// annotations) and policy_validation.go (the rules, with messages that name the
// annotation and the fix). vocabulary.go declares every sluice.dev/ key once, so
// a key sluice does not know is an error, not a default; review.go turns a
// target's annotations into findings (errors, settings with no effect, near
// misses of the opt-in) for lint, the admission webhook and the receiver; and
// doc_decode.go reads the YAML documents inside annotations field by field, so
// each mistake is named by its path.
package config
