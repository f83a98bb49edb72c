package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// chart draws one SVG chart over the rollout's time span. Everything it
// writes is escaped here: the result goes into the page as is.
type chart struct {
	from, to   time.Time
	lo, hi     float64
	w, h       float64
	left, base float64 // plot area: x from left, y up to base
	b          strings.Builder
}

const (
	chartW   = 880.0
	chartH   = 180.0
	padLeft  = 56.0
	padRight = 12.0
	padTop   = 10.0
	padBot   = 24.0
)

func newChart(from, to time.Time, lo, hi float64) *chart {
	if !to.After(from) {
		to = from.Add(time.Second)
	}
	if hi <= lo {
		lo, hi = lo-1, hi+1
	}
	c := &chart{from: from, to: to, lo: lo, hi: hi, w: chartW, h: chartH, left: padLeft, base: chartH - padBot}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" width="%g" height="%g" role="img">`, c.w, c.h, c.w, c.h)
	c.axes()
	return c
}

func (c *chart) x(t time.Time) float64 {
	f := float64(t.Sub(c.from)) / float64(c.to.Sub(c.from))
	return c.left + math.Max(0, math.Min(1, f))*(c.w-c.left-padRight)
}

func (c *chart) y(v float64) float64 {
	f := (v - c.lo) / (c.hi - c.lo)
	return c.base - math.Max(0, math.Min(1, f))*(c.base-padTop)
}

// axes draws the frame, four value ticks and five time ticks (UTC).
func (c *chart) axes() {
	fmt.Fprintf(&c.b, `<rect x="%g" y="%g" width="%g" height="%g" class="frame"/>`, c.left, padTop, c.w-c.left-padRight, c.base-padTop)
	for i := 0; i <= 4; i++ {
		v := c.lo + (c.hi-c.lo)*float64(i)/4
		y := c.y(v)
		fmt.Fprintf(&c.b, `<line x1="%g" x2="%g" y1="%g" y2="%g" class="grid"/><text x="%g" y="%g" class="tick" text-anchor="end">%s</text>`,
			c.left, c.w-padRight, y, y, c.left-4, y+4, esc(short(v)))
	}
	for i := 0; i <= 4; i++ {
		t := c.from.Add(time.Duration(float64(c.to.Sub(c.from)) * float64(i) / 4))
		anchor := map[int]string{0: "start", 4: "end"}[i]
		if anchor == "" {
			anchor = "middle"
		}
		fmt.Fprintf(&c.b, `<text x="%g" y="%g" class="tick" text-anchor="%s">%s</text>`, c.x(t), c.h-6, anchor, t.UTC().Format("15:04:05"))
	}
}

// band shades the values between lo and hi.
func (c *chart) band(lo, hi float64, class, title string) {
	y1, y2 := c.y(hi), c.y(lo)
	fmt.Fprintf(&c.b, `<rect x="%g" y="%g" width="%g" height="%g" class="%s"><title>%s</title></rect>`, c.left, y1, c.w-c.left-padRight, y2-y1, class, esc(title))
}

// hline is a horizontal line at v.
func (c *chart) hline(v float64, class, title string) {
	y := c.y(v)
	fmt.Fprintf(&c.b, `<line x1="%g" x2="%g" y1="%g" y2="%g" class="%s"><title>%s</title></line>`, c.left, c.w-padRight, y, y, class, esc(title))
}

// vline marks a moment, e.g. a command.
func (c *chart) vline(t time.Time, class, title string) {
	x := c.x(t)
	fmt.Fprintf(&c.b, `<line x1="%g" x2="%g" y1="%g" y2="%g" class="%s"><title>%s</title></line>`, x, x, padTop, c.base, class, esc(title))
}

// point is one measured value at t.
type point struct {
	t     time.Time
	v     float64
	class string
	title string
}

// line joins points; steps draws it as a step function (traffic shares
// hold until the next write).
func (c *chart) line(ps []point, class string, steps bool) {
	if len(ps) == 0 {
		return
	}
	var d strings.Builder
	for i, p := range ps {
		x, y := c.x(p.t), c.y(p.v)
		switch {
		case i == 0:
			fmt.Fprintf(&d, "M%.1f %.1f", x, y)
		case steps:
			fmt.Fprintf(&d, " H%.1f V%.1f", x, y)
		default:
			fmt.Fprintf(&d, " L%.1f %.1f", x, y)
		}
	}
	fmt.Fprintf(&c.b, `<path d="%s" class="%s"/>`, d.String(), class)
}

// dots marks each point, with its title as a tooltip.
func (c *chart) dots(ps []point) {
	for _, p := range ps {
		fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="3.5" class="%s"><title>%s</title></circle>`, c.x(p.t), c.y(p.v), p.class, esc(p.title))
	}
}

func (c *chart) svg() template.HTML {
	c.b.WriteString(`</svg>`)
	return template.HTML(c.b.String()) // #nosec: every text in it went through esc
}

func esc(s string) string { return html.EscapeString(s) }

// short prints a tick value briefly.
func short(v float64) string {
	if math.Abs(v) >= 1000 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// span is the range of vs widened by a tenth on each side, so points do not
// sit on the frame.
func span(vs ...float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		return 0, 1
	}
	pad := (hi - lo) / 10
	if pad == 0 {
		pad = math.Max(math.Abs(hi)/10, 1)
	}
	return lo - pad, hi + pad
}
