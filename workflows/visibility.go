package workflows

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/knative"
)

// status answers the status query.
func (r *rollout) status(ctx workflow.Context) api.Status { return view(&r.st, workflow.Now(ctx)) }

// currentAttributes are sluice's search attributes as the SDK holds them
// now: it merges every upsert into the workflow's info and carries them
// through continue-as-new, so sluice keeps no copy of its own.
func currentAttributes(ctx workflow.Context) map[string]string {
	sa := workflow.GetTypedSearchAttributes(ctx)
	out := map[string]string{}
	for _, k := range api.KeywordAttrs {
		if v, ok := sa.GetKeyword(k); ok {
			out[k.GetName()] = v
		}
	}
	for _, k := range api.IntAttrs {
		if v, ok := sa.GetInt64(k); ok {
			out[k.GetName()] = strconv.FormatInt(v, 10)
		}
	}
	return out
}

// publish upserts the search attributes that changed and refreshes the
// current details shown in the UI. Unchanged attributes cost nothing.
func (r *rollout) publish(ctx workflow.Context) {
	v := view(&r.st, workflow.Now(ctx))
	want := attributes(v)
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	have := currentAttributes(ctx)
	var updates []temporal.SearchAttributeUpdate
	for _, n := range names {
		v := want[n]
		// An unset keyword and an empty one read the same.
		if have[n] == v {
			continue
		}
		updates = append(updates, attrUpdate(n, v))
	}
	if len(updates) > 0 {
		if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
			workflow.GetLogger(ctx).Warn("cannot upsert search attributes", "error", err)
		}
	}
	workflow.SetCurrentDetails(ctx, details(v))
}

// attributes are the search attribute values of a status, by name.
func attributes(v api.Status) map[string]string {
	return map[string]string{
		api.AttrTarget.GetName():    api.TargetAttr(v.Target),
		api.AttrNamespace.GetName(): v.Target.Namespace,
		api.AttrPhase.GetName():     string(v.Shown),
		api.AttrCandidate.GetName(): v.Candidate,
		api.AttrStable.GetName():    v.Stable,
		api.AttrOutcome.GetName():   string(v.Outcome),
		api.AttrStep.GetName():      strconv.Itoa(v.StepNumber),
		api.AttrWeight.GetName():    strconv.FormatInt(v.Weight, 10),
	}
}

// StartAttributes are the search attributes a new rollout of candidate
// starts with: those its first publish would set, so that publish costs no
// upsert.
func StartAttributes(t knative.TargetRef, candidate string) temporal.SearchAttributes {
	want := attributes(view(&state{Target: t, Candidate: candidate, Phase: api.PhaseResolving}, time.Time{}))
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	updates := make([]temporal.SearchAttributeUpdate, 0, len(names))
	for _, n := range names {
		updates = append(updates, attrSet(n, want[n]))
	}
	return temporal.NewSearchAttributes(updates...)
}

// attrSet sets an attribute, an empty keyword included: a start's
// attributes are all present, as every later read expects.
func attrSet(name, value string) temporal.SearchAttributeUpdate {
	switch name {
	case api.AttrStep.GetName(), api.AttrWeight.GetName():
		n, _ := strconv.ParseInt(value, 10, 64)
		return temporal.NewSearchAttributeKeyInt64(name).ValueSet(n)
	}
	return temporal.NewSearchAttributeKeyKeyword(name).ValueSet(value)
}

func attrUpdate(name, value string) temporal.SearchAttributeUpdate {
	if value == "" && name != api.AttrStep.GetName() && name != api.AttrWeight.GetName() {
		return temporal.NewSearchAttributeKeyKeyword(name).ValueUnset()
	}
	return attrSet(name, value)
}

// details renders the rollout as Markdown for the Temporal UI: a headline and
// the step table.
func details(st api.Status) string {
	now := st.AsOf
	var b strings.Builder
	phase := string(st.Phase)
	if st.Paused {
		phase = "Paused — " + st.PauseReason
	}
	// One short line above the table: the UI gives current details a small
	// frame, and the summary already names the Revisions.
	fmt.Fprintf(&b, "**%s** · %s", phase, knative.FormatTraffic(st.Live))
	if st.Phase == api.PhaseHolding && !st.Paused && st.HoldUntil.After(now) {
		// A clock time, not a countdown: the details are only refreshed
		// when the workflow runs, and a countdown would stand still.
		fmt.Fprintf(&b, " · hold ends at %s UTC", clock(st.HoldUntil))
	}
	if st.CandidateReady && st.ReadinessFrom != "" && !st.Phase.Done() {
		fmt.Fprintf(&b, " · Ready by %s", st.ReadinessFrom)
	}
	if an := st.Analysis; an != nil && len(an.Tallies) > 0 {
		// On the headline: the frame is small, and a line or a table more
		// would cut the step table off.
		for _, t := range an.Tallies {
			name := t.Name
			if t.DryRun {
				name += " (dry run)"
			}
			fmt.Fprintf(&b, " · %s %s", name, lastShort(t.Last))
			if t.Failures > 0 {
				fmt.Fprintf(&b, " (%d failed)", t.Failures)
			}
		}
	}
	if c := st.Capacity; c != nil {
		fmt.Fprintf(&b, " · pods %s %d, %s %d", st.Candidate, c.CandidatePods, st.Stable, c.StablePodsNow)
	}
	b.WriteString("\n\n| step | weight | hold | gate | started | ended |\n|---|---|---|---|---|---|\n")
	for i, s := range st.Steps {
		marker := ""
		if i+1 == st.StepNumber && !st.Phase.Done() && st.Phase != api.PhaseWaitingReady && st.Phase != api.PhaseResolving {
			marker = " ◀"
		}
		gate := ""
		if s.Gate {
			gate = "manual"
			if s.GatePassed {
				gate += " (passed)"
			}
		}
		weight := fmt.Sprintf("%d%%", s.Weight)
		if s.Skipped {
			weight += " (skipped)"
		}
		fmt.Fprintf(&b, "| %d%s | %s | %s | %s | %s | %s |\n", i+1, marker, weight, s.Hold, gate, clock(s.StartedAt), clock(s.EndedAt))
	}
	if st.Reason != "" {
		fmt.Fprintf(&b, "\n%s\n", st.Reason)
	}
	return b.String()
}

// lastShort is a check's last measurement in a few characters: "0.998 ✓",
// "HTTP 500 ✗", "no data", "error".
func lastShort(m *analysis.Measurement) string {
	if m == nil {
		return "—"
	}
	mark := "✓"
	switch {
	case m.Result == analysis.Inconclusive:
		return "no data"
	case m.Result == analysis.Error:
		return "error"
	case m.Result == analysis.Failed:
		mark = "✗"
	case m.Result == analysis.Marginal:
		mark = "~"
	}
	switch {
	case m.Compare != nil && m.Value != nil:
		// A comparison's value is the shift from the stable.
		return fmt.Sprintf("%+.4g vs stable (allowed %s) %s", *m.Value, m.Compare.AllowedText(), mark)
	case m.Value != nil:
		return analysis.FormatValue(*m.Value) + " " + mark
	case m.StatusCode != 0:
		return fmt.Sprintf("HTTP %d %s", m.StatusCode, mark)
	}
	return mark
}

func clock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05")
}
