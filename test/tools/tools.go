//go:build tools

// Package tools pins the binaries the e2e suite builds from Go modules:
// kube-apiserver from k8s.io/kubernetes and etcd from go.etcd.io/etcd/server/v3.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
