//go:build tools

// Package helm pins Helm, which packages sluice's chart (make release) and
// lints, renders, installs, upgrades and uninstalls it in the chart test.
package helm

import _ "helm.sh/helm/v4/cmd/helm"
