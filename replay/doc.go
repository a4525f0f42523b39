// Package replay answers one question: what would a candidate policy change
// about the requests a cluster really served? It reads kube-apiserver audit
// logs (audit.k8s.io/v1 Event JSON lines, plain or gzip, streamed with
// memory independent of their size), rebuilds each request's authorization
// checks as kube-apiserver 1.37 makes them (impersonation included:
// k8s.io/apiserver/pkg/endpoints/filters/impersonation), decides them with a
// model of kube-apiserver's authorization chain around deputy (Chain:
// system:masters, Node, the Webhook authorizers with their CEL
// matchConditions, RBAC), compares each decision with a baseline (the
// decision the event records, or the same chain under another policy) and
// reports the changes grouped by identity, verb and resource (Report).
//
// It does not load policies, read clusters or print for a command: its
// callers (cmd/deputy replay) build the authorizers it is given. It must
// not import serve, webhook, apps or syncer.
package replay
