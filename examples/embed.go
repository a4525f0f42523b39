// Package examples embeds the example policy in this directory: RBAC objects,
// kube-apiserver's bootstrap grants that ordinary clients need when
// authorization.defaultDecision is Deny (bootstrap.yaml), an AppProject and a
// token file holding only SHA-256 hashes (the demo tokens are
// "deputy-demo-alice" and "deputy-demo-bob"). `deputy serve` without
// --policy serves it.
package examples

import "embed"

// FS holds rbac.yaml, bootstrap.yaml, projects.yaml and tokens.csv at its root.
//
//go:embed *.yaml *.csv
var FS embed.FS

// Demo tokens whose SHA-256 hashes are in tokens.csv; for local trials only.
const (
	AliceToken = "deputy-demo-alice"
	BobToken   = "deputy-demo-bob"
)
