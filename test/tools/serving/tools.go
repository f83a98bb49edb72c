//go:build tools

// Package serving pins Knative Serving's controller, webhook, autoscaler and
// queue-proxy, which the local stack runs unmodified outside a cluster.
package serving

import (
	_ "knative.dev/serving/cmd/autoscaler"
	_ "knative.dev/serving/cmd/controller"
	_ "knative.dev/serving/cmd/queue"
	_ "knative.dev/serving/cmd/webhook"
)
