// Package livestate is the Application controller's view of what lives in
// the clusters it syncs to, for drift detection: a cache of metadata-only
// informers (client-go metadatainformer), one per scope (destination
// cluster, identity, resource, namespace), shared by every Application whose
// objects live in that scope. A scope's informer is started by the first
// List that asks for it and stopped when no List asked for it within
// IdleTimeout, so that watching costs one list per kind per namespace and
// one watch, not a read per object per period.
//
// Every read is made as the scope's identity: the caller's NewClient hands
// back a metadata client that already impersonates it (the ServiceAccount
// the Application's project derives), so a scope shows exactly what that
// identity may list, and a scope it may not list fails with the apiserver's
// Forbidden. A scope whose informer fails before its first list, or whose
// watch later fails with Forbidden, Unauthorized or NotFound (the resource
// is gone), is stopped and forgotten: the next List starts it afresh, so a
// permission granted since is picked up.
//
// The cache holds metadata only (metav1.PartialObjectMetadata: names,
// labels, annotations, owner references, managedFields): never object
// bodies, so never a Secret's values.
//
// It tells the controller about drift through OnChange: when an object that
// carries the tracking annotation is added or deleted, or changed in a way
// that can matter (labels, annotations, generation, deletion, owners, or
// managedFields other than the status subresource's), it calls OnChange
// with the annotation's value and the scope that saw it (the value is
// whatever the object's writer put there: the receiver checks, with
// Interests, that the scope is one the named Application reads). A controller writing an
// object's status does not call it; the informer's first list does not
// either.
//
// It must not import the engine (package syncer) or decide whom to act as.
package livestate
