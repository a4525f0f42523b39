// Package diff compares what a sync would apply with what the cluster holds,
// for the engine's diff and drift checks. It is pure: it reads the objects
// it is handed and never the cluster, and it imports no other deputy
// package.
//
// It answers two questions.
//
// What would a sync change in one object? Normalize strips the fields the
// apiserver owns (managedFields, resourceVersion, uid, status, ...) so that
// only what a manifest can set is compared, MaskSecrets hides a Secret's
// values while keeping which keys changed visible (as Argo CD's
// HideSecretData in gitops-engine pkg/diff does), and Unified renders the
// difference as a unified diff of YAML documents, as kubectl diff shows it.
//
// Has someone changed what deputy applied? deputy applies every object with
// server-side apply as field manager "deputy"; the apiserver then records,
// in the object's managedFields, the set of fields deputy owns (the FieldsV1
// format of structured-merge-diff). Another writer that changes one of
// those fields takes it over, and a field someone removes leaves the set.
// Missing compares the body deputy applied with that set and names the
// fields deputy no longer owns, from the object's metadata alone (a
// metadata-only list carries managedFields), without reading a value of the
// live object.
//
// testdata/*.yaml are drift cases: a body deputy applies, the writes of
// other managers that follow, the fields deputy's set then lacks, and that
// set as kube-apiserver v1.37 recorded it. The envtest test replays each
// case against a real kube-apiserver (and records the sets with
// UPDATE_GOLDEN=1); the unit tests read the recorded sets.
package diff
