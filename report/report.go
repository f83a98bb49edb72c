// Package report renders one rollout as a self-contained HTML page — no
// script, no style sheet, no font or image from elsewhere, so it opens from
// a file or a mail attachment anywhere: the traffic share over time, every
// check's measurements over time (a comparison's candidate against its
// stable, with the allowed effect), the commands with who, when and why,
// and the outcome. Its input is the rollout's status and the measurements
// of its history (workflows/control reads both); rendering is pure.
package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/api"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/knative"
	"github.com/sluicehq/sluice/workflows/control"
)

// Input is what a report shows.
type Input struct {
	Status api.Status
	Rounds []control.Round
	// Generated is when the report was made: a running rollout's charts
	// end there.
	Generated time.Time
	// UILink is the rollout's page in the Temporal UI, if known.
	UILink  string
	Version string
}

//go:embed page.html.tmpl
var pageText string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("15:04:05")
	},
	"traffic": knative.FormatTraffic,
	"add1":    func(i int) int { return i + 1 },
}).Parse(pageText))

// view is the page's model.
type view struct {
	Input
	Title   string
	State   string
	Span    string
	Traffic template.HTML
	Checks  []checkView
	Rounds  []roundView
}

type checkView struct {
	Name, Kind, Detail, Last string
	DryRun                   bool
	Chart                    template.HTML
}

type roundView struct {
	At           time.Time
	Step         int
	Weight       int64
	Measurements []analysis.Measurement
}

// Render writes the report of in to w.
func Render(w io.Writer, in Input) error {
	st := in.Status
	from, to := st.StartedAt, st.EndedAt
	if to.IsZero() {
		to = in.Generated
	}
	for _, r := range in.Rounds {
		for _, m := range r.Measurements {
			if !m.At.IsZero() && m.At.After(to) {
				to = m.At
			}
		}
	}
	v := view{Input: in, Title: fmt.Sprintf("%s/%s: %s → %s", st.Target.Namespace, st.Target.Name, or(st.Stable, "(none)"), st.Candidate)}
	v.State = string(st.Shown)
	if st.Outcome != "" {
		v.State = string(st.Outcome)
	}
	v.Span = fmt.Sprintf("%s, %s", from.UTC().Format("2006-01-02 15:04:05Z"), to.Sub(from).Round(time.Second))
	v.Traffic = trafficChart(st, from, to)
	rounds := scored(in.Rounds, st.Policy.Analysis)
	v.Checks = checkCharts(rounds, st.Policy.Analysis, from, to)
	for _, r := range rounds {
		rv := roundView{At: r.At, Measurements: r.Measurements}
		if len(r.Measurements) > 0 {
			rv.Step, rv.Weight = r.Measurements[0].Step, r.Measurements[0].Weight
		}
		v.Rounds = append(v.Rounds, rv)
	}
	return page.Execute(w, v)
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// scored adds each round's score, as the workflow computed it from the
// same measurements, to the rounds of comparisons.
func scored(rounds []control.Round, an *config.Analysis) []control.Round {
	if !an.Comparisons() {
		return rounds
	}
	out := make([]control.Round, len(rounds))
	for i, r := range rounds {
		out[i] = control.Round{At: r.At, Measurements: slices.Clone(r.Measurements)}
		var round []analysis.Scored
		var last analysis.Measurement
		for _, c := range an.Checks {
			if c.Compare == nil {
				continue
			}
			for _, m := range r.Measurements {
				if m.Name == c.Name && m.Kind == analysis.KindCompare {
					round = append(round, analysis.Scored{Measurement: m, Weight: c.Weight, Critical: c.Critical})
					last = m
				}
			}
		}
		if len(round) == 0 {
			continue
		}
		s := analysis.Score(round, an.Score)
		s.Step, s.Weight, s.At = last.Step, last.Weight, last.At
		out[i].Measurements = append(out[i].Measurements, s)
	}
	return out
}

// trafficChart is the candidate's share over time: each step's weight from
// when it began, and where the rollout left it.
func trafficChart(st api.Status, from, to time.Time) template.HTML {
	c := newChart(from, to, 0, 100)
	ps := []point{{t: from, v: 0}}
	for i, s := range st.Steps {
		if s.StartedAt.IsZero() {
			continue
		}
		ps = append(ps, point{t: s.StartedAt, v: float64(s.Weight), class: "dot", title: fmt.Sprintf("step %d: %d%% at %s", i+1, s.Weight, s.StartedAt.UTC().Format("15:04:05"))})
	}
	end := float64(st.Weight)
	switch st.Outcome {
	case api.OutcomeSucceeded:
		end = 100
	case api.OutcomeRolledBack, api.OutcomeAborted:
		end = 0
	}
	if !st.EndedAt.IsZero() {
		ps = append(ps, point{t: st.EndedAt, v: end, class: "dot", title: fmt.Sprintf("%s: %g%% at %s", st.Outcome, end, st.EndedAt.UTC().Format("15:04:05"))})
	}
	ps = append(ps, point{t: to, v: ps[len(ps)-1].v})
	for _, cmd := range st.Commands {
		title := fmt.Sprintf("%s by %s at %s", cmd.Name, cmd.By, cmd.At.UTC().Format("15:04:05"))
		if cmd.Reason != "" {
			title += ": " + cmd.Reason
		}
		c.vline(cmd.At, "command", title)
	}
	c.line(ps, "traffic", true)
	c.dots(ps[1 : len(ps)-1])
	return c.svg()
}

// checkCharts draws one chart per check, comparison and the score, in
// policy order.
func checkCharts(rounds []control.Round, an *config.Analysis, from, to time.Time) []checkView {
	if an == nil {
		return nil
	}
	series := map[string][]analysis.Measurement{}
	for _, r := range rounds {
		for _, m := range r.Measurements {
			series[m.Name] = append(series[m.Name], m)
		}
	}
	var out []checkView
	for _, c := range an.Checks {
		ms := series[c.Name]
		cv := checkView{Name: c.Name, Kind: "check", DryRun: c.DryRun}
		if c.Compare != nil {
			cv.Kind = "comparison"
			cv.Detail = fmt.Sprintf("%s is bad beyond %s, at %g%% confidence, %d samples a side at least, every %s over %s",
				c.Compare.Direction, c.Compare.Effect, c.Compare.Confidence*100, c.Compare.MinSamples, c.Step, c.Window)
			cv.Chart = comparisonChart(ms, from, to)
		} else {
			cv.Detail = "pass range " + analysis.Range(c.Min, c.Max) + ", over " + c.Window.String()
			cv.Chart = valueChart(ms, c.Min, c.Max, from, to)
		}
		if len(ms) > 0 {
			cv.Last = ms[len(ms)-1].Summary()
		}
		out = append(out, cv)
	}
	if an.Comparisons() {
		ms := series["score"]
		cv := checkView{Name: "score", Kind: "score", Detail: fmt.Sprintf("passes at %g, marginal from %g", an.Score.Pass, an.Score.Marginal)}
		pass, marginal := an.Score.Pass, an.Score.Marginal
		cv.Chart = valueChart(ms, &marginal, &pass, from, to)
		if len(ms) > 0 {
			cv.Last = ms[len(ms)-1].Summary()
		}
		out = append(out, cv)
	}
	return out
}

func resultClass(r analysis.Result) string {
	switch r {
	case analysis.Passed:
		return "pass"
	case analysis.Failed:
		return "fail"
	case analysis.Marginal:
		return "marginal"
	}
	return "none"
}

// valueChart draws a check's values with its pass range shaded (for the
// score: marginal to pass in amber, above pass in green).
func valueChart(ms []analysis.Measurement, min, max *float64, from, to time.Time) template.HTML {
	var vals []float64
	var ps []point
	for _, m := range ms {
		if m.Value == nil {
			continue
		}
		vals = append(vals, *m.Value)
		ps = append(ps, point{t: m.At, v: *m.Value, class: resultClass(m.Result), title: m.At.UTC().Format("15:04:05") + " " + m.Summary()})
	}
	bounds := slices.Clone(vals)
	for _, b := range []*float64{min, max} {
		if b != nil {
			bounds = append(bounds, *b)
		}
	}
	lo, hi := span(bounds...)
	c := newChart(from, to, lo, hi)
	switch {
	case min != nil && max != nil && len(ms) > 0 && ms[0].Kind == analysis.KindScore:
		c.band(*min, *max, "band-marginal", "marginal")
		c.band(*max, hi, "band-pass", "passes")
	case min != nil || max != nil:
		bl, bh := lo, hi
		if min != nil {
			bl = *min
		}
		if max != nil {
			bh = *max
		}
		c.band(bl, bh, "band-pass", "pass range "+analysis.Range(min, max))
	}
	c.line(ps, "value", false)
	c.dots(ps)
	for _, m := range ms {
		if m.Value == nil && !m.At.IsZero() {
			c.vline(m.At, "nodata", m.At.UTC().Format("15:04:05")+" "+m.Summary())
		}
	}
	return c.svg()
}

// comparisonChart draws both sides' medians round by round, and where the
// candidate would be beyond the allowed effect from the stable.
func comparisonChart(ms []analysis.Measurement, from, to time.Time) template.HTML {
	var cand, stable, limitUp, limitDown []point
	var vals []float64
	for _, m := range ms {
		r := m.Compare
		if r == nil || r.Candidate.Count == 0 || r.Stable.Count == 0 {
			continue
		}
		title := m.At.UTC().Format("15:04:05") + " " + m.Summary()
		cand = append(cand, point{t: m.At, v: r.Candidate.Median, class: resultClass(m.Result), title: title})
		stable = append(stable, point{t: m.At, v: r.Stable.Median, class: "stable", title: title})
		vals = append(vals, r.Candidate.Median, r.Stable.Median)
		if r.Direction != analysis.Decrease && (m.Result == analysis.Passed || m.Result == analysis.Failed) {
			limitUp = append(limitUp, point{t: m.At, v: r.Stable.Median + r.Allowed})
			vals = append(vals, r.Stable.Median+r.Allowed)
		}
		if r.Direction != analysis.Increase && (m.Result == analysis.Passed || m.Result == analysis.Failed) {
			limitDown = append(limitDown, point{t: m.At, v: r.Stable.Median - r.Allowed})
			vals = append(vals, r.Stable.Median-r.Allowed)
		}
	}
	lo, hi := span(vals...)
	c := newChart(from, to, lo, hi)
	c.line(limitUp, "limit", false)
	c.line(limitDown, "limit", false)
	c.line(stable, "stable", false)
	c.line(cand, "candidate", false)
	c.dots(stable)
	c.dots(cand)
	for _, m := range ms {
		if (m.Compare == nil || m.Compare.Candidate.Count == 0 || m.Compare.Stable.Count == 0) && !m.At.IsZero() {
			c.vline(m.At, "nodata", m.At.UTC().Format("15:04:05")+" "+m.Summary())
		}
	}
	return c.svg()
}
