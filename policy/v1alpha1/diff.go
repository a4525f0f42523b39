package v1alpha1

import "encoding/json"

// KindApplicationDiff is the kind of the answer of deputy's diff API
// (GET .../applications/NAME/diff).
const KindApplicationDiff = "ApplicationDiff"

// Resource diff actions: what a sync would do to one resource.
const (
	// DiffActionCreate: the object does not exist; a sync creates it.
	DiffActionCreate = "create"
	// DiffActionUpdate: the object exists and a sync changes it.
	DiffActionUpdate = "update"
	// DiffActionUnchanged: a sync would change nothing in it.
	DiffActionUnchanged = "unchanged"
	// DiffActionPrune: the object is tracked by the Application but no
	// longer rendered; a sync with prune deletes it.
	DiffActionPrune = "prune"
	// DiffActionError: the server refused the dry run; Message says why.
	DiffActionError = "error"
)

// ApplicationDiff is what a sync of an Application would change, as the
// destination answered a server-side dry-run apply of every rendered object
// made as the ServiceAccount the project derives (the answer of
// `deputy diff` and of GET .../applications/NAME/diff). Hooks are not
// included (they run on every sync; Argo CD's diff leaves them out too).
type ApplicationDiff struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace and Name are the Application's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Revisions are the commits rendered, one per source.
	Revisions []string `json:"revisions,omitempty"`
	// Identity is who the destination saw (OperationState.Identity's
	// vocabulary).
	Identity string `json:"identity,omitempty"`
	// Resources are the rendered objects and the objects prune would
	// delete, in apply order (prune last).
	Resources []ResourceDiff `json:"resources"`
	// Warnings say what could not be looked at (a kind the identity may
	// not list in a namespace: the objects to prune there are unknown).
	Warnings []string `json:"warnings,omitempty"`
}

// Changed reports whether a sync with prune would change anything: some
// resource would be created, updated or pruned, or could not be compared.
func (d *ApplicationDiff) Changed() bool {
	for _, r := range d.Resources {
		if r.Action != DiffActionUnchanged {
			return true
		}
	}
	return false
}

// ResourceDiff is one resource of an ApplicationDiff.
type ResourceDiff struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version,omitempty"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Action is one of the DiffAction* values.
	Action string `json:"action"`
	// Diff is a unified diff (3 lines of context) from the live object to
	// the object a sync would leave, both as YAML without server-owned
	// noise (metadata.managedFields, resourceVersion, uid, generation,
	// creationTimestamp, status, deputy's applied digest annotation). A
	// Secret's data and stringData values are masked ("++++++++"): equal
	// values get equal masks, a changed value a different one. Empty when
	// unchanged.
	Diff string `json:"diff,omitempty"`
	// Message says why the resource could not be compared (Action error),
	// or adds context (a dry run skipped because the namespace is created
	// by the sync).
	Message string `json:"message,omitempty"`
}

// MaxLocalDiffRequestBytes bounds the body of a local diff (deputy diff
// --local): larger is 413.
const MaxLocalDiffRequestBytes = 8 << 20

// LocalDiffRequest is the body of POST .../applications/NAME/diff (deputy
// diff --local): manifests to diff instead of what the Application's
// sources render. Everything else is a diff's: the project checks of every
// object, the destination, the ServiceAccount, dry runs as it; the answer
// has no revisions.
type LocalDiffRequest struct {
	// Objects are Kubernetes objects, each with apiVersion, kind and
	// metadata.name; at least one.
	Objects []json.RawMessage `json:"objects"`
}
