package config

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/analysis"
)

// Comparison defaults: a sample every 30s over 5m, at least 8 a side,
// judged at 95% confidence; rounds pass at 95, are marginal from 75.
const (
	DefaultCompareStep   = 30 * time.Second
	DefaultCompareWindow = 5 * time.Minute
	DefaultMinSamples    = 8
	DefaultConfidence    = 0.95
	DefaultScorePass     = 95
	DefaultScoreMarginal = 75
)

// compareDoc is a check's compare: field: `true` for the built-in's
// defaults, or what to change of them.
type compareDoc struct {
	Direction  string     `json:"direction"`
	Effect     *effectDoc `json:"effect"`
	Confidence *float64   `json:"confidence"`
	MinSamples *int       `json:"minSamples"`
	Step       string     `json:"step"`
	off        bool
}

func (c *compareDoc) decodeFields(d *docDecoder, raw json.RawMessage, path string) {
	var on bool
	if json.Unmarshal(raw, &on) == nil {
		c.off = !on
		return
	}
	if jsonKind(raw) != "a mapping" {
		d.bad[path] = true
		d.fail("%s must be true, false or a mapping of direction, effect, confidence, minSamples and step, not %s", path, jsonKind(raw))
		return
	}
	type plain compareDoc
	d.object(raw, path, (*plain)(c))
}

// effectDoc is an allowed effect: a number in the metric's unit (0.005),
// or a share of the stable's median ("10%").
type effectDoc analysis.Effect

func (e *effectDoc) UnmarshalJSON(b []byte) error {
	if json.Unmarshal(b, &e.Value) == nil {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a number or a percentage like \"10%%\", not %s", jsonKind(b))
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || !strings.HasSuffix(strings.TrimSpace(s), "%") {
		return fmt.Errorf("%q must be a number or a percentage like \"10%%\"", s)
	}
	e.Value, e.Relative = v, true
	return nil
}

// comparison reads a comparison check's settings over b's defaults (a
// built-in's; none for a query) and checks they can reach a verdict.
func comparison(fail func(string, ...any), ch *Check, c checkDoc, b builtin) {
	d := c.Compare
	cmpr := b.compare
	cmpr.Confidence, cmpr.MinSamples = DefaultConfidence, DefaultMinSamples
	ch.Step, ch.Weight, ch.Critical = DefaultCompareStep, 1, c.Critical
	if c.Window == "" {
		ch.Window = DefaultCompareWindow
	}
	if c.Min != nil || c.Max != nil {
		fail("check %q: min and max do not apply to a comparison, which judges the candidate against the stable; set compare.effect instead", c.Name)
	}
	if c.FailureLimit != nil || c.InconclusiveLimit != nil {
		fail("check %q: failureLimit and inconclusiveLimit do not apply to a comparison; the round's score decides (score:)", c.Name)
	}
	if b.query == "" {
		a, _ := RenderQuery(ch.Query, TemplateVars{Revision: "a"})
		if other, _ := RenderQuery(ch.Query, TemplateVars{Revision: "b"}); a == other {
			fail("check %q: a comparison's query must name the Revision it measures as {{.Revision}}, so it can be run for the candidate and for the stable", c.Name)
		}
	}
	switch dir := analysis.Direction(d.Direction); dir {
	case "":
		if cmpr.Direction == "" {
			fail("check %q: compare.direction is needed for a query: increase (a rise is bad), decrease or either", c.Name)
		}
	case analysis.Increase, analysis.Decrease, analysis.Either:
		cmpr.Direction = dir
	default:
		fail("check %q: compare.direction %q must be increase (a rise is bad), decrease or either", c.Name, d.Direction)
	}
	if d.Effect != nil {
		cmpr.Effect = analysis.Effect(*d.Effect)
	}
	if v := cmpr.Effect.Value; v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		fail("check %q: compare.effect %s must be a finite number of at least 0", c.Name, cmpr.Effect)
	}
	if d.Confidence != nil {
		cmpr.Confidence = *d.Confidence
	}
	if v := cmpr.Confidence; !(v >= 0.5 && v <= 0.999) {
		fail("check %q: compare.confidence %g must be between 0.5 and 0.999, e.g. 0.95", c.Name, v)
	}
	if d.MinSamples != nil {
		cmpr.MinSamples = *d.MinSamples
	}
	if cmpr.MinSamples < 3 {
		fail("check %q: compare.minSamples %d must be at least 3", c.Name, cmpr.MinSamples)
	}
	if d.Step != "" {
		if v, err := time.ParseDuration(d.Step); err != nil || v < time.Second {
			fail("check %q: compare.step %q must be a duration of at least 1s, e.g. \"30s\"", c.Name, d.Step)
		} else {
			ch.Step = v
		}
	}
	if n := int(ch.Window/ch.Step) + 1; ch.Step > 0 && n < cmpr.MinSamples {
		fail("check %q: a window of %s sampled every %s gives at most %d samples a side, fewer than minSamples %d; widen the window, shorten compare.step or lower compare.minSamples",
			c.Name, ch.Window, ch.Step, n, cmpr.MinSamples)
	}
	if c.Weight != nil {
		if w := *c.Weight; !(w > 0 && w <= 100) {
			fail("check %q: weight %g must be above 0 and at most 100", c.Name, w)
		}
		ch.Weight = *c.Weight
	}
	ch.Compare = &cmpr
}
