package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/sluicehq/sluice/knative"
)

// ReadTraffic reads an object's spec.traffic and where each target routes.
func (a *Activities) ReadTraffic(ctx context.Context, o knative.ObjectRef) (LiveTraffic, error) {
	live, err := a.Knative.ReadTraffic(ctx, o)
	if err != nil {
		return LiveTraffic{}, kubeError(err)
	}
	out := LiveTraffic{Spec: live.Spec, Routed: live.Routed()}
	for _, t := range live.Status {
		if t.Tag != "" && t.URL != nil {
			if out.URLs == nil {
				out.URLs = map[string]string{}
			}
			out.URLs[t.Tag] = t.URL.String()
		}
	}
	return out, nil
}

// AwaitTrafficChange answers once the object's spec.traffic is no longer
// in.Expected — someone else changed it — or the object is gone, watching
// it so the change is seen at once; or, if neither happens within in.For,
// with no change. It heartbeats while it watches.
func (a *Activities) AwaitTrafficChange(ctx context.Context, in AwaitTrafficInput) (TrafficChange, error) {
	live, err := a.Knative.ReadTraffic(ctx, in.Object)
	if err != nil {
		return TrafficChange{}, kubeError(err)
	}
	if !knative.SameTraffic(live.Spec, in.Expected) {
		return TrafficChange{Changed: true, Found: live.Spec}, nil
	}
	defer keepAlive(ctx)()
	wctx, cancel := a.watchContext(ctx, in.For)
	defer cancel()
	var change TrafficChange
	_, err = a.Knative.WatchTraffic(wctx, in.Object, live.ResourceVersion, func(l knative.Live, gone bool) bool {
		switch {
		case gone:
			change = TrafficChange{Gone: true}
		case !knative.SameTraffic(l.Spec, in.Expected):
			change = TrafficChange{Changed: true, Found: l.Spec}
		default:
			return false
		}
		return true
	})
	if err := workerStopping(wctx); err != nil {
		return TrafficChange{}, err
	}
	warnNoWatch(ctx, err)
	return change, nil
}

// warnNoWatch says why an activity could not watch: without a watch the
// workflow falls back to re-reading, slower and dearer.
func warnNoWatch(ctx context.Context, err error) {
	if err != nil && activity.IsActivity(ctx) {
		activity.GetLogger(ctx).Warn("cannot watch; the rollout will re-read instead", "error", err)
	}
}
