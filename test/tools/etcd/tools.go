//go:build tools

// Package etcd pins the etcd server the local stack runs.
package etcd

import _ "go.etcd.io/etcd/server/v3"
