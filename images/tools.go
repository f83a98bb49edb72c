//go:build tools

// Package images pins ko, which builds sluice's images.
package images

import _ "github.com/google/ko"
