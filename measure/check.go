// Package measure takes sluice's measurements: a check's query on
// Prometheus (or a comparison of candidate and stable over the same
// window), and a webhook call. Judging them is package analysis's, which
// does no I/O.
package measure

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/config"
)

// Measurer takes measurements with its clients.
type Measurer struct {
	Prometheus Prometheus
	Webhooks   Webhooks
}

// CheckInput asks for one measurement of a check.
type CheckInput struct {
	Check      config.Check        `json:"check"`
	Prometheus string              `json:"prometheus"`
	Vars       config.TemplateVars `json:"vars"`
	Step       int                 `json:"step"`
}

// QueryTimeout bounds one Prometheus query.
const QueryTimeout = 30 * time.Second

// Check runs a check's query once and judges the value. A query that
// cannot be run is an Error measurement, not an error: the workflow counts
// errors against the check's consecutive-error limit, which retries would
// hide.
func (ms Measurer) Check(ctx context.Context, in CheckInput) analysis.Measurement {
	c := in.Check
	m := analysis.Measurement{Name: c.Name, Kind: analysis.KindCheck, Step: in.Step, Weight: in.Vars.Weight, Min: c.Min, Max: c.Max, DryRun: c.DryRun}
	if in.Vars.Revision == "" {
		in.Vars.Revision = in.Vars.Candidate
	}
	if c.Compare != nil {
		return ms.compare(ctx, in, m)
	}
	in.Vars.Window = config.PromDuration(c.Window)
	query, err := config.RenderQuery(c.Query, in.Vars)
	if err != nil {
		m.Result, m.Message, m.At = analysis.Error, "render query: "+err.Error(), time.Now()
		return m
	}
	qctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	m.At = time.Now()
	value, err := ms.Prometheus.Query(qctx, in.Prometheus, query, m.At)
	if err != nil {
		m.Result, m.Message = analysis.Error, err.Error()
		return m
	}
	m.Value = value
	m.Result = analysis.Evaluate(value, c.Min, c.Max)
	if value == nil {
		m.Message = ms.noData(qctx, in, query, m.At)
	}
	return m
}

// compare samples the check's query for the candidate and for the stable
// over the same window, at the same instants, and compares the samples.
func (ms Measurer) compare(ctx context.Context, in CheckInput, m analysis.Measurement) analysis.Measurement {
	c := in.Check
	m.Kind, m.At = analysis.KindCompare, time.Now()
	if in.Vars.Stable == "" {
		m.Result, m.Message = analysis.Inconclusive, "no stable Revision to compare with"
		return m
	}
	qctx, cancel := context.WithTimeout(ctx, QueryTimeout)
	defer cancel()
	// Each sample is the query over one step, so samples do not overlap.
	in.Vars.Window = config.PromDuration(c.Step)
	// Ending on a multiple of the step keeps the samples on one grid from
	// round to round.
	end := m.At.Truncate(c.Step)
	var samples [2][]float64
	for i, rev := range []string{in.Vars.Candidate, in.Vars.Stable} {
		in.Vars.Revision = rev
		query, err := config.RenderQuery(c.Query, in.Vars)
		if err != nil {
			m.Result, m.Message = analysis.Error, "render query: "+err.Error()
			return m
		}
		if samples[i], err = ms.Prometheus.QueryRange(qctx, in.Prometheus, query, end.Add(-c.Window), end, c.Step); err != nil {
			m.Result, m.Message = analysis.Error, fmt.Sprintf("revision %s: %v", rev, err)
			return m
		}
	}
	r := c.Compare.Compare(samples[0], samples[1])
	m.Compare, m.Result, m.Message = &r, r.Result, r.Message
	if r.Result == analysis.Passed || r.Result == analysis.Failed {
		m.Value = &r.Shift
	}
	return m
}

// noData says why a check found nothing. For a built-in it asks Prometheus
// whether it holds any series of the candidate at all: none means nothing
// scrapes its queue-proxies, which no amount of waiting fixes.
func (ms Measurer) noData(ctx context.Context, in CheckInput, query string, at time.Time) string {
	c := in.Check
	if c.Series == "" {
		return "no data: " + query
	}
	series, err := config.RenderQuery(c.Series, in.Vars)
	if err != nil {
		return "no data: " + query
	}
	n, err := ms.Prometheus.Query(ctx, in.Prometheus, series, at)
	switch {
	case err != nil:
		return "no data: " + query
	case n == nil || *n == 0:
		return fmt.Sprintf("no series of %s for revision %s in namespace %s at %s: is Prometheus scraping the queue-proxies' port 9091 (http-usermetric), "+
			"and does config-observability in knative-serving set request-metrics-protocol: prometheus? see docs/analysis.md", c.Metric, in.Vars.Candidate, in.Vars.Namespace, in.Prometheus)
	}
	return fmt.Sprintf("revision %s's queue-proxies are scraped (%s series) but served no requests in the last %s: does it get traffic? query: %s",
		in.Vars.Candidate, analysis.FormatValue(*n), in.Vars.Window, query)
}

// WebhookInput asks for one webhook call.
type WebhookInput struct {
	Hook    config.Webhook   `json:"hook"`
	Payload analysis.Payload `json:"payload"`
}

// Webhook posts the payload, retrying as the hook allows, and reports the
// answer as a measurement. A hook that does not answer 2xx is a Failed
// measurement, not an error: what that means is the workflow's decision
// (roll back during a hold, keep waiting at a gate).
func (ms Measurer) Webhook(ctx context.Context, in WebhookInput) analysis.Measurement {
	h := in.Hook
	m := ms.Webhooks.Call(ctx, Hook{URL: h.URL, Timeout: h.Timeout, Retries: h.Retries}, in.Payload)
	m.Step, m.Weight, m.At = in.Payload.Rollout.Step, in.Payload.Rollout.Weight, time.Now()
	return m
}
