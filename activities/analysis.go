package activities

import (
	"context"

	"github.com/sluicehq/sluice/analysis"
	"github.com/sluicehq/sluice/measure"
)

// MeasureCheck runs a check's query once and judges the value (see
// measure.Measurer.Check); a query that cannot be run is an Error
// measurement, not an activity failure.
func (a *Activities) MeasureCheck(ctx context.Context, in measure.CheckInput) (analysis.Measurement, error) {
	defer keepAlive(ctx)()
	return a.Measure.Check(ctx, in), nil
}

// CallWebhook posts the payload, retrying as the hook allows, and reports
// the answer as a measurement (see measure.Measurer.Webhook).
func (a *Activities) CallWebhook(ctx context.Context, in measure.WebhookInput) (analysis.Measurement, error) {
	defer keepAlive(ctx)()
	return a.Measure.Webhook(ctx, in), nil
}
