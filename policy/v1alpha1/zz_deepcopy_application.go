package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

// Hand-written deep copies, in the shape deepcopy-gen produces, for the types
// in application.go. Pointers are copied into fresh values, slices into fresh
// slices (nil stays nil, empty stays empty).

var (
	_ runtime.Object = (*Application)(nil)
	_ runtime.Object = (*ApplicationList)(nil)
)

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *Application) DeepCopyInto(out *Application) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	out.Operation = in.Operation.DeepCopy()
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a deep copy of the Application, or nil for a nil receiver.
func (in *Application) DeepCopy() *Application {
	if in == nil {
		return nil
	}
	out := new(Application)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *Application) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ApplicationList) DeepCopyInto(out *ApplicationList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Application, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy of the ApplicationList, or nil for a nil receiver.
func (in *ApplicationList) DeepCopy() *ApplicationList {
	if in == nil {
		return nil
	}
	out := new(ApplicationList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ApplicationList) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ApplicationSpec) DeepCopyInto(out *ApplicationSpec) {
	*out = *in
	in.Source.DeepCopyInto(&out.Source)
	if in.Sources != nil {
		out.Sources = make([]ApplicationSource, len(in.Sources))
		for i := range in.Sources {
			in.Sources[i].DeepCopyInto(&out.Sources[i])
		}
	}
	out.SyncPolicy = in.SyncPolicy.DeepCopy()
}

// DeepCopy returns a deep copy of the ApplicationSpec, or nil for a nil receiver.
func (in *ApplicationSpec) DeepCopy() *ApplicationSpec {
	if in == nil {
		return nil
	}
	out := new(ApplicationSpec)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ApplicationSource) DeepCopyInto(out *ApplicationSource) {
	*out = *in
	out.Helm = in.Helm.DeepCopy()
}

// DeepCopy returns a deep copy of the ApplicationSource, or nil for a nil receiver.
func (in *ApplicationSource) DeepCopy() *ApplicationSource {
	if in == nil {
		return nil
	}
	out := new(ApplicationSource)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *HelmSource) DeepCopyInto(out *HelmSource) {
	*out = *in
	out.ValueFiles = appProjectCopyStrings(in.ValueFiles)
	out.ValuesObject = in.ValuesObject.DeepCopy()
	if in.Parameters != nil {
		out.Parameters = append([]HelmParameter{}, in.Parameters...)
	}
	if in.FileParameters != nil {
		out.FileParameters = append([]HelmFileParameter{}, in.FileParameters...)
	}
	out.APIVersions = appProjectCopyStrings(in.APIVersions)
}

// DeepCopy returns a deep copy of the HelmSource, or nil for a nil receiver.
func (in *HelmSource) DeepCopy() *HelmSource {
	if in == nil {
		return nil
	}
	out := new(HelmSource)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *SyncPolicy) DeepCopyInto(out *SyncPolicy) {
	*out = *in
	out.Automated = in.Automated.DeepCopy()
	out.SyncOptions = appProjectCopyStrings(in.SyncOptions)
	out.Retry = in.Retry.DeepCopy()
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *RetryStrategy) DeepCopyInto(out *RetryStrategy) {
	*out = *in
	out.Backoff = in.Backoff.DeepCopy()
}

// DeepCopy returns a deep copy of the RetryStrategy, or nil for a nil receiver.
func (in *RetryStrategy) DeepCopy() *RetryStrategy {
	if in == nil {
		return nil
	}
	out := new(RetryStrategy)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *Backoff) DeepCopyInto(out *Backoff) {
	*out = *in
	if in.Factor != nil {
		f := *in.Factor
		out.Factor = &f
	}
}

// DeepCopy returns a deep copy of the Backoff, or nil for a nil receiver.
func (in *Backoff) DeepCopy() *Backoff {
	if in == nil {
		return nil
	}
	out := new(Backoff)
	in.DeepCopyInto(out)
	return out
}

// DeepCopy returns a deep copy of the SyncPolicy, or nil for a nil receiver.
func (in *SyncPolicy) DeepCopy() *SyncPolicy {
	if in == nil {
		return nil
	}
	out := new(SyncPolicy)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *SyncPolicyAutomated) DeepCopyInto(out *SyncPolicyAutomated) {
	*out = *in
}

// DeepCopy returns a copy of the SyncPolicyAutomated, or nil for a nil receiver.
func (in *SyncPolicyAutomated) DeepCopy() *SyncPolicyAutomated {
	if in == nil {
		return nil
	}
	out := new(SyncPolicyAutomated)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *Operation) DeepCopyInto(out *Operation) {
	*out = *in
	out.Sync = in.Sync.DeepCopy()
}

// DeepCopy returns a deep copy of the Operation, or nil for a nil receiver.
func (in *Operation) DeepCopy() *Operation {
	if in == nil {
		return nil
	}
	out := new(Operation)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *SyncOperation) DeepCopyInto(out *SyncOperation) {
	*out = *in
	out.Revisions = appProjectCopyStrings(in.Revisions)
}

// DeepCopy returns a deep copy of the SyncOperation, or nil for a nil receiver.
func (in *SyncOperation) DeepCopy() *SyncOperation {
	if in == nil {
		return nil
	}
	out := new(SyncOperation)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *InitiatedBy) DeepCopyInto(out *InitiatedBy) {
	*out = *in
}

// DeepCopy returns a copy of the InitiatedBy, or nil for a nil receiver.
func (in *InitiatedBy) DeepCopy() *InitiatedBy {
	if in == nil {
		return nil
	}
	out := new(InitiatedBy)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ApplicationStatus) DeepCopyInto(out *ApplicationStatus) {
	*out = *in
	in.Sync.DeepCopyInto(&out.Sync)
	in.Health.DeepCopyInto(&out.Health)
	if in.Resources != nil {
		out.Resources = make([]ResourceStatus, len(in.Resources))
		for i := range in.Resources {
			in.Resources[i].DeepCopyInto(&out.Resources[i])
		}
	}
	out.OperationState = in.OperationState.DeepCopy()
	if in.ReconciledAt != nil {
		out.ReconciledAt = in.ReconciledAt.DeepCopy()
	}
	if in.Conditions != nil {
		out.Conditions = make([]ApplicationCondition, len(in.Conditions))
		for i := range in.Conditions {
			out.Conditions[i] = in.Conditions[i]
			if in.Conditions[i].LastTransitionTime != nil {
				out.Conditions[i].LastTransitionTime = in.Conditions[i].LastTransitionTime.DeepCopy()
			}
		}
	}
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *HealthStatus) DeepCopyInto(out *HealthStatus) {
	*out = *in
	if in.LastTransitionTime != nil {
		out.LastTransitionTime = in.LastTransitionTime.DeepCopy()
	}
}

// DeepCopy returns a deep copy of the HealthStatus, or nil for a nil receiver.
func (in *HealthStatus) DeepCopy() *HealthStatus {
	if in == nil {
		return nil
	}
	out := new(HealthStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ResourceStatus) DeepCopyInto(out *ResourceStatus) {
	*out = *in
	out.Health = in.Health.DeepCopy()
}

// DeepCopy returns a deep copy of the ApplicationStatus, or nil for a nil receiver.
func (in *ApplicationStatus) DeepCopy() *ApplicationStatus {
	if in == nil {
		return nil
	}
	out := new(ApplicationStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *SyncStatus) DeepCopyInto(out *SyncStatus) {
	*out = *in
	out.Revisions = appProjectCopyStrings(in.Revisions)
}

// DeepCopy returns a deep copy of the SyncStatus, or nil for a nil receiver.
func (in *SyncStatus) DeepCopy() *SyncStatus {
	if in == nil {
		return nil
	}
	out := new(SyncStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *OperationState) DeepCopyInto(out *OperationState) {
	*out = *in
	in.Operation.DeepCopyInto(&out.Operation)
	in.StartedAt.DeepCopyInto(&out.StartedAt)
	if in.FinishedAt != nil {
		out.FinishedAt = in.FinishedAt.DeepCopy()
	}
	out.SyncResult = in.SyncResult.DeepCopy()
	if in.NextRetryAt != nil {
		out.NextRetryAt = in.NextRetryAt.DeepCopy()
	}
}

// DeepCopy returns a deep copy of the OperationState, or nil for a nil receiver.
func (in *OperationState) DeepCopy() *OperationState {
	if in == nil {
		return nil
	}
	out := new(OperationState)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *SyncOperationResult) DeepCopyInto(out *SyncOperationResult) {
	*out = *in
	out.Revisions = appProjectCopyStrings(in.Revisions)
	if in.Resources != nil {
		out.Resources = make([]*ResourceResult, len(in.Resources))
		for i, r := range in.Resources {
			out.Resources[i] = r.DeepCopy()
		}
	}
}

// DeepCopy returns a deep copy of the SyncOperationResult, or nil for a nil receiver.
func (in *SyncOperationResult) DeepCopy() *SyncOperationResult {
	if in == nil {
		return nil
	}
	out := new(SyncOperationResult)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ResourceResult) DeepCopyInto(out *ResourceResult) {
	*out = *in
	out.Health = in.Health.DeepCopy()
}

// DeepCopy returns a copy of the ResourceResult, or nil for a nil receiver.
func (in *ResourceResult) DeepCopy() *ResourceResult {
	if in == nil {
		return nil
	}
	out := new(ResourceResult)
	in.DeepCopyInto(out)
	return out
}
