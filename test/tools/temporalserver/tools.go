//go:build tools

// Package temporalserver pins Temporal's server — the version the dev
// server embeds — for the stack's production-shaped Temporal: its frontend,
// history, matching and worker services as separate processes on
// PostgreSQL, and the SQL tool that sets up their schemas.
package temporalserver

import (
	_ "go.temporal.io/server/cmd/server"
	_ "go.temporal.io/server/cmd/tools/sql"
)
