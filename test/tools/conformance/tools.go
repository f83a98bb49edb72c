//go:build tools

// Package conformance pins the CloudEvents conformance tool's version.
package conformance

import _ "github.com/cloudevents/conformance/cmd/cloudevents"
