//go:build tools

// Package eventing pins the ApiServerSource adapter the local stack runs.
package eventing

import _ "knative.dev/eventing/cmd/apiserver_receive_adapter"
