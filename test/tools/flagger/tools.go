//go:build tools

// Package flagger pins Flagger, the progressive-delivery controller whose
// Knative provider `make bench-peers` measures beside sluice on the same
// local stack. Its Canary CRD is applied from this module's copy.
package flagger

import _ "github.com/fluxcd/flagger/cmd/flagger"
