package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Application is a set of manifests in Git synced to a destination by deputy's
// sync engine, as the ServiceAccount its AppProject derives. Field names
// follow Argo CD's Application (argoproj/argo-cd pkg/apis/application/v1alpha1
// types.go) for the subset deputy implements.
type Application struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ApplicationSpec `json:"spec"`
	// Operation is a requested sync, recorded by whichever replica received
	// the request and run by the leader (as Argo CD's Application.operation).
	Operation *Operation        `json:"operation,omitempty"`
	Status    ApplicationStatus `json:"status,omitempty"`
}

// ApplicationList is a list of Applications.
type ApplicationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Application `json:"items"`
}

// ApplicationSpec is what to sync, where, and how.
type ApplicationSpec struct {
	// Project names the AppProject (in the deputy.dev group, in the
	// Application's namespace) that governs this Application.
	Project string `json:"project"`
	// Source is where the manifests come from, for an Application with one
	// source. Leave it empty when Sources is set: deputy refuses both (Argo
	// CD silently ignores Source then).
	Source ApplicationSource `json:"source,omitzero"`
	// Sources are several sources (Argo CD's spec.sources): each is rendered
	// as Source would be and the objects are concatenated in this order; a
	// source with Ref is also a repository that Helm sources read value
	// files from ($REF/path). Non-empty, it is used instead of Source.
	Sources []ApplicationSource `json:"sources,omitempty"`
	// Destination is the cluster (server URL or registered name) and namespace.
	Destination ApplicationDestination `json:"destination"`
	// SyncPolicy controls automated sync and sync options.
	SyncPolicy *SyncPolicy `json:"syncPolicy,omitempty"`
}

// ApplicationSource is a Git repository, a path in it and a revision.
type ApplicationSource struct {
	// RepoURL is the Git repository: https://, file:// or a local path; with
	// Chart, the Helm repository (https://) or OCI registry (oci://HOST/PATH).
	RepoURL string `json:"repoURL"`
	// Path is the directory inside the repository ("" or "." for its root).
	Path string `json:"path,omitempty"`
	// TargetRevision is a branch, tag, commit SHA or HEAD (default HEAD);
	// with Chart, a chart version or semver range.
	TargetRevision string `json:"targetRevision,omitempty"`
	// Chart is an Argo CD chart source: the chart's name in the Helm
	// repository (https://) or OCI registry (oci://HOST/PATH) of RepoURL,
	// at TargetRevision (an exact version or a semver range; "" the newest
	// stable version). A chart held in Git needs no chart field: its path
	// holds Chart.yaml.
	Chart string `json:"chart,omitempty"`
	// Helm configures the Helm render of a chart in Git (the path holds
	// Chart.yaml), with Argo CD's fields and semantics.
	Helm *HelmSource `json:"helm,omitempty"`
	// Ref names this source, in spec.sources only, so that a Helm source's
	// value files can read from its repository: "$REF/path" is path from
	// the root of this source's repository at this source's revision.
	// Letters, digits, '_' and '-' (Argo CD's rule), unique among the
	// sources; not with Chart. A source with Ref and no Path renders
	// nothing itself (it contributes only files).
	Ref string `json:"ref,omitempty"`
}

// HelmSource is Argo CD's spec.source.helm: how a chart is rendered (as
// `helm template` does). Values are merged as Helm merges them, later
// winning: the chart's values.yaml, ValueFiles in order, Values (or
// ValuesObject, which replaces Values when set), then Parameters whose
// ForceString is false, Parameters whose ForceString is true, and
// FileParameters.
type HelmSource struct {
	// ValueFiles are values files, paths in the repository relative to the
	// source path (an absolute path is relative to the repository's root);
	// none may leave the repository. URLs are refused.
	ValueFiles []string `json:"valueFiles,omitempty"`
	// IgnoreMissingValueFiles skips a value file that does not exist
	// instead of failing.
	IgnoreMissingValueFiles bool `json:"ignoreMissingValueFiles,omitempty"`
	// Values are values as a YAML string; ignored when ValuesObject is set.
	Values string `json:"values,omitempty"`
	// ValuesObject are values as an object; it replaces Values when set.
	ValuesObject *runtime.RawExtension `json:"valuesObject,omitempty"`
	// Parameters are `helm template --set NAME=VALUE` (--set-string when
	// ForceString); a comma in a value is part of the value. A "$" (Argo
	// CD's build environment, $ARGOCD_APP_NAME...) is refused for now.
	Parameters []HelmParameter `json:"parameters,omitempty"`
	// FileParameters are `helm template --set-file NAME=PATH`: the value is
	// the content of a file in the repository (paths as ValueFiles').
	FileParameters []HelmFileParameter `json:"fileParameters,omitempty"`
	// ReleaseName is the release's name (.Release.Name); default: the
	// Application's name.
	ReleaseName string `json:"releaseName,omitempty"`
	// Namespace is the release's namespace (.Release.Namespace); default:
	// spec.destination.namespace.
	Namespace string `json:"namespace,omitempty"`
	// SkipCrds leaves out the chart's crds/ directory.
	SkipCrds bool `json:"skipCrds,omitempty"`
	// SkipSchemaValidation skips the charts' values.schema.json.
	SkipSchemaValidation bool `json:"skipSchemaValidation,omitempty"`
	// KubeVersion is .Capabilities.KubeVersion (e.g. "1.37.0"); default:
	// the destination cluster's version, read as the sync identity (Argo
	// CD's default).
	KubeVersion string `json:"kubeVersion,omitempty"`
	// APIVersions are .Capabilities.APIVersions ("GROUP/VERSION" or
	// "GROUP/VERSION/KIND") added to Helm's built-in list; default: every
	// API version and kind the destination serves, discovered as the sync
	// identity (Argo CD's default).
	APIVersions []string `json:"apiVersions,omitempty"`
	// PassCredentials is Argo CD's option to send a Helm repository's
	// credentials to the hosts its charts are served from. It has no effect:
	// charts from Git fetch nothing.
	PassCredentials bool `json:"passCredentials,omitempty"`
}

// HelmParameter is one `--set` (or `--set-string`) of a Helm render.
type HelmParameter struct {
	// Name is the value's path, e.g. image.tag or list[0].name.
	Name string `json:"name"`
	// Value is the value, parsed as Helm's --set parses it unless
	// ForceString.
	Value string `json:"value,omitempty"`
	// ForceString keeps the value a string (--set-string).
	ForceString bool `json:"forceString,omitempty"`
}

// HelmFileParameter is one `--set-file` of a Helm render.
type HelmFileParameter struct {
	// Name is the value's path.
	Name string `json:"name"`
	// Path is the file in the repository whose content is the value.
	Path string `json:"path"`
}

// SyncPolicy is Argo CD's sync policy subset.
type SyncPolicy struct {
	// Automated syncs on Git changes and periodically.
	Automated *SyncPolicyAutomated `json:"automated,omitempty"`
	// SyncOptions are Argo CD's sync options deputy supports (see
	// docs/configuration.md "Sync options"): CreateNamespace=true,
	// Prune=false, PruneLast=true, PrunePropagationPolicy=foreground|
	// background|orphan, ServerSideApply=true, ApplyOutOfSyncOnly=true.
	SyncOptions []string `json:"syncOptions,omitempty"`
	// Retry retries a failed sync operation (automated or manual), Argo
	// CD's syncPolicy.retry. Nil: a failed operation is not retried.
	Retry *RetryStrategy `json:"retry,omitempty"`
	// HealthTimeout (deputy's field, a Go duration such as "5m") bounds how
	// long an operation waits for the resources of one wave to become
	// healthy (hooks: to complete); "" uses the configuration's
	// sync.healthTimeout. The operation also ends at
	// sync.limits.operationTimeout.
	HealthTimeout string `json:"healthTimeout,omitempty"`
}

// RetryStrategy is Argo CD's syncPolicy.retry: how often and how soon a
// failed sync operation is run again.
type RetryStrategy struct {
	// Limit is the number of retries after the first attempt; a negative
	// value retries without limit (Argo CD's rule); 0 means no retry.
	Limit int64 `json:"limit,omitempty"`
	// Backoff is the wait between attempts; nil uses Argo CD's defaults
	// (5s, factor 2, at most 3m).
	Backoff *Backoff `json:"backoff,omitempty"`
}

// Backoff is Argo CD's retry backoff: the n-th retry (n from 1) waits
// min(Duration × Factor^(n-1), MaxDuration).
type Backoff struct {
	// Duration is the first wait, a Go duration ("5s") or a number of
	// seconds ("5"); default 5s.
	Duration string `json:"duration,omitempty"`
	// Factor multiplies the wait after each retry; default 2.
	Factor *int64 `json:"factor,omitempty"`
	// MaxDuration caps the wait, same format as Duration; default 3m.
	MaxDuration string `json:"maxDuration,omitempty"`
}

// SyncPolicyAutomated configures automated sync.
type SyncPolicyAutomated struct {
	// Prune deletes tracked objects no longer rendered during automated syncs.
	Prune bool `json:"prune,omitempty"`
	// SelfHeal re-syncs when the live state drifts.
	SelfHeal bool `json:"selfHeal,omitempty"`
}

// Operation is a requested operation.
type Operation struct {
	Sync        *SyncOperation `json:"sync,omitempty"`
	InitiatedBy InitiatedBy    `json:"initiatedBy,omitempty"`
}

// SyncOperation parameterises one sync.
type SyncOperation struct {
	// Revision overrides the source's targetRevision for this sync (an
	// Application with spec.source only).
	Revision string `json:"revision,omitempty"`
	// Revisions override the targetRevisions of spec.sources, one per
	// source in order ("" keeps that source's targetRevision); Argo CD's
	// field. Empty keeps every targetRevision.
	Revisions []string `json:"revisions,omitempty"`
	// Prune deletes tracked objects that are no longer rendered.
	Prune bool `json:"prune,omitempty"`
	// HealthTimeout overrides spec.syncPolicy.healthTimeout for this
	// operation (a Go duration); "" keeps it.
	HealthTimeout string `json:"healthTimeout,omitempty"`
	// DryRun sends every write with dryRun=All.
	DryRun bool `json:"dryRun,omitempty"`
}

// InitiatedBy says who asked for an operation.
type InitiatedBy struct {
	// Username of the caller, or "" for automated syncs.
	Username string `json:"username,omitempty"`
	// Automated is true for syncs deputy started itself.
	Automated bool `json:"automated,omitempty"`
}

// ApplicationStatus is what deputy observed and did.
type ApplicationStatus struct {
	Sync SyncStatus `json:"sync,omitempty"`
	// Health is the Application's health: the worst health of its
	// resources, hooks excluded (Argo CD's status.health).
	Health HealthStatus `json:"health,omitempty"`
	// Resources are the Application's resources as its last operation left
	// them, hooks excluded, with their health (Argo CD's status.resources).
	Resources      []ResourceStatus `json:"resources,omitempty"`
	OperationState *OperationState  `json:"operationState,omitempty"`
	// ReconciledAt is when the controller last compared the live state
	// with Git (Argo CD's status.reconciledAt); nil before it did.
	ReconciledAt *metav1.Time `json:"reconciledAt,omitempty"`
	// Conditions are the Application's current problems outside an
	// operation (Argo CD's status.conditions), for example a DeletionError
	// that keeps the resources finalizer.
	Conditions []ApplicationCondition `json:"conditions,omitempty"`
}

// Application condition types (Argo CD's ApplicationConditionType values
// deputy sets).
const (
	// ApplicationConditionDeletionError: deleting the Application's
	// resources (its resources finalizer) failed; the finalizer stays.
	ApplicationConditionDeletionError = "DeletionError"
	// ApplicationConditionComparisonError: the live state could not be
	// compared with Git (status.sync.status is Unknown).
	ApplicationConditionComparisonError = "ComparisonError"
)

// ApplicationCondition is one condition of an Application (Argo CD's
// ApplicationCondition).
type ApplicationCondition struct {
	// Type is one of the ApplicationCondition* types.
	Type string `json:"type"`
	// Message says what is wrong and how to proceed.
	Message string `json:"message"`
	// LastTransitionTime is when the condition was first seen.
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// Health status codes (Argo CD's vocabulary), from best to worst as Argo CD
// ranks them for an Application: Healthy, Suspended, Progressing, Missing,
// Degraded, Unknown.
const (
	HealthStatusHealthy     = "Healthy"
	HealthStatusSuspended   = "Suspended"
	HealthStatusProgressing = "Progressing"
	HealthStatusMissing     = "Missing"
	HealthStatusDegraded    = "Degraded"
	HealthStatusUnknown     = "Unknown"
)

// HealthStatus is a resource's or an Application's health.
type HealthStatus struct {
	// Status is one of the HealthStatus* codes ("" when never assessed).
	Status string `json:"status,omitempty"`
	// Message says why, when not Healthy.
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Status last changed (Application health
	// only).
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// ResourceStatus is one resource of an Application (Argo CD's
// status.resources entry).
type ResourceStatus struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Status is the sync status: Synced or OutOfSync.
	Status string        `json:"status,omitempty"`
	Health *HealthStatus `json:"health,omitempty"`
	// SyncWave is the resource's sync wave.
	SyncWave int64 `json:"syncWave,omitempty"`
	// RequiresPruning: the object is tracked by the Application but no
	// longer rendered (Argo CD's field); a sync with prune deletes it.
	RequiresPruning bool `json:"requiresPruning,omitempty"`
	// Message says why the resource is OutOfSync (drift detection), or is
	// empty.
	Message string `json:"message,omitempty"`
}

// Sync status codes.
const (
	SyncStatusCodeUnknown   = "Unknown"
	SyncStatusCodeSynced    = "Synced"
	SyncStatusCodeOutOfSync = "OutOfSync"
)

// SyncStatus is whether the live state matches Git and at which revision.
type SyncStatus struct {
	Status string `json:"status,omitempty"`
	// Revision is the synced commit of spec.source.
	Revision string `json:"revision,omitempty"`
	// Revisions are the synced commits of spec.sources, one per source in
	// order (Argo CD's field); Revision is empty then.
	Revisions []string `json:"revisions,omitempty"`
}

// Operation phases.
const (
	OperationRunning   = "Running"
	OperationSucceeded = "Succeeded"
	OperationFailed    = "Failed"
	OperationError     = "Error"
)

// OperationState is the state of the last or current operation.
type OperationState struct {
	Operation Operation `json:"operation"`
	// Phase is Running, Succeeded, Failed or Error.
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	// Identity is who the cluster saw: "system:serviceaccount:ns:sa",
	// "controller identity: impersonation not enforced" (no
	// destinationServiceAccounts entry matched) or "controller identity:
	// impersonation disabled".
	Identity   string               `json:"identity,omitempty"`
	StartedAt  metav1.Time          `json:"startedAt"`
	FinishedAt *metav1.Time         `json:"finishedAt,omitempty"`
	SyncResult *SyncOperationResult `json:"syncResult,omitempty"`
	// ObservedGeneration is the Application's metadata.generation when the
	// operation started, i.e. the generation that recorded its operation
	// field (cluster mode; recording or clearing the operation field bumps
	// the generation). A final state of the current generation means the
	// operation is done and only the removal of the operation field is
	// pending; a Running one that no replica runs was interrupted by a
	// change of leader and is run again.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// RetryCount (Argo CD's field) is how many times the operation was
	// retried after it failed (spec.syncPolicy.retry).
	RetryCount int64 `json:"retryCount,omitempty"`
	// NextRetryAt is when the operation is retried next: set while a failed
	// operation waits for its retry (phase Running), nil otherwise.
	NextRetryAt *metav1.Time `json:"nextRetryAt,omitempty"`
	// Interruptions is how many times the operation was started again
	// after the leader running it stopped before it ended (cluster mode).
	// The leader records it before it runs the operation; one started
	// apps.MaxOperationAttempts times without ending is ended in Error
	// instead of being run again.
	Interruptions int64 `json:"interruptions,omitempty"`
}

// SyncOperationResult is the per-resource outcome of a sync.
type SyncOperationResult struct {
	// Revision is the commit spec.source was rendered at ("" with
	// spec.sources).
	Revision string `json:"revision"`
	// Revisions are the commits of spec.sources, one per source in order
	// (Argo CD's field).
	Revisions []string          `json:"revisions,omitempty"`
	Resources []*ResourceResult `json:"resources,omitempty"`
}

// Resource result codes (Argo CD's ResultCode).
const (
	ResultCodeSynced       = "Synced"
	ResultCodeSyncFailed   = "SyncFailed"
	ResultCodePruned       = "Pruned"
	ResultCodePruneSkipped = "PruneSkipped"
)

// Sync phases (Argo CD's SyncPhase), in the order they run; SyncFail runs
// only when an earlier phase failed.
const (
	SyncPhasePreSync  = "PreSync"
	SyncPhaseSync     = "Sync"
	SyncPhasePostSync = "PostSync"
	SyncPhaseSyncFail = "SyncFail"
)

// Hook phases (Argo CD's OperationPhase of a hook).
const (
	HookPhaseRunning   = "Running"
	HookPhaseSucceeded = "Succeeded"
	HookPhaseFailed    = "Failed"
	HookPhaseError     = "Error"
)

// ResourceResult is what happened to one object.
type ResourceResult struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Status is Synced, SyncFailed, Pruned or PruneSkipped.
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	// HookType is the hook's type (PreSync, Sync, PostSync, SyncFail) for a
	// hook resource, "" otherwise (Argo CD's field).
	HookType string `json:"hookType,omitempty"`
	// HookPhase is a hook's progress: Running, Succeeded, Failed or Error
	// (Argo CD's field).
	HookPhase string `json:"hookPhase,omitempty"`
	// SyncPhase is the phase the resource ran in (Argo CD's field).
	SyncPhase string `json:"syncPhase,omitempty"`
	// SyncWave is the resource's wave within its phase.
	SyncWave int64 `json:"syncWave,omitempty"`
	// Health is the resource's health when the operation last looked
	// (deputy's field; Argo CD keeps it in status.resources only).
	Health *HealthStatus `json:"health,omitempty"`
}
