//go:build tools

// Package kwok pins kwok, whose fake nodes run the local stack's pods.
package kwok

import _ "sigs.k8s.io/kwok/cmd/kwok"
