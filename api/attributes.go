package api

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/sluicehq/sluice/knative"
)

// Search attributes sluice keeps on every rollout, so the Temporal UI and
// `sluice` can list rollouts by target, phase and revision.
var (
	AttrTarget    = temporal.NewSearchAttributeKeyKeyword("SluiceTarget")
	AttrNamespace = temporal.NewSearchAttributeKeyKeyword("SluiceNamespace")
	AttrPhase     = temporal.NewSearchAttributeKeyKeyword("SluicePhase")
	AttrCandidate = temporal.NewSearchAttributeKeyKeyword("SluiceCandidate")
	AttrStable    = temporal.NewSearchAttributeKeyKeyword("SluiceStable")
	AttrOutcome   = temporal.NewSearchAttributeKeyKeyword("SluiceOutcome")
	AttrStep      = temporal.NewSearchAttributeKeyInt64("SluiceStep")
	AttrWeight    = temporal.NewSearchAttributeKeyInt64("SluiceWeight")
)

// KeywordAttrs and IntAttrs are every attribute above, by type.
var (
	KeywordAttrs = []temporal.SearchAttributeKeyKeyword{AttrTarget, AttrNamespace, AttrPhase, AttrCandidate, AttrStable, AttrOutcome}
	IntAttrs     = []temporal.SearchAttributeKeyInt64{AttrStep, AttrWeight}
)

// SearchAttributes lists every attribute with its type name as the Temporal
// CLI takes it (`--search-attribute Name=Type`).
func SearchAttributes() map[string]string {
	out := map[string]string{}
	for _, k := range KeywordAttrs {
		out[k.GetName()] = "Keyword"
	}
	for _, k := range IntAttrs {
		out[k.GetName()] = "Int"
	}
	return out
}

// TargetAttr is the SluiceTarget value of a target: namespace/kind/name.
func TargetAttr(t knative.TargetRef) string { return t.String() }

// StaticSummary is the one line the Temporal UI shows for a rollout:
// "hello: hello-00001 → hello-00002", or "hello: roll out hello-00002" when
// the starter does not know the stable Revision.
func StaticSummary(t knative.TargetRef, stable, candidate string) string {
	if stable == "" {
		return fmt.Sprintf("%s: roll out %s", t.Name, candidate)
	}
	return fmt.Sprintf("%s: %s → %s", t.Name, stable, candidate)
}
