//go:build tools

// Package prometheus pins the Prometheus server the local stack scrapes
// Knative's queue-proxies with: built from source because Debian's
// prometheus package is built without Kubernetes service discovery.
package prometheus

import _ "github.com/prometheus/prometheus/cmd/prometheus"
