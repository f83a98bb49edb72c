//go:build tools

// Package temporalui pins Temporal's web UI server — the version the dev
// server embeds — which the stack runs as a process of its own beside
// Temporal's production topology, as a platform team runs it.
package temporalui

import _ "github.com/temporalio/ui-server/v2/cmd/server"
