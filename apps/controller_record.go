package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Start records a sync on the Application (its operation field) for the
// leader to run, and returns the requested operation as a Running state
// whose ObservedGeneration is the generation that recorded it. project is
// not used: the leader looks the AppProject up when it starts the
// operation. It implements Applications.Start in cluster mode.
//
// Errors: ErrOperationInProgress when the Application already records an
// operation (a failed one waiting for its retry too: remove the operation
// field to cancel it); ErrInvalidSync for an invalid spec.syncPolicy or
// op (naming the field) or an Application being deleted (its deletion
// would never let the sync run); the API's NotFound when the Application is gone; an error
// naming sync.applicationNamespaces for an Application this controller does
// not reconcile; other API errors (apierrors.StatusError) as they come.
func (c *Controller) Start(ctx context.Context, app *v1alpha1.Application, _ *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy) (*v1alpha1.OperationState, error) {
	if app == nil {
		return nil, errors.New("failed to start a sync: an Application is required")
	}
	if !c.manages(app.Namespace) {
		return nil, fmt.Errorf("deputy does not reconcile Applications in namespace %q: add it to sync.applicationNamespaces", app.Namespace)
	}
	if app.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: Application %s/%s is being deleted: it is not synced any more", ErrInvalidSync, app.Namespace, app.Name)
	}
	if err := validateSync(app, op); err != nil {
		return nil, err
	}
	opCopy := op
	operation := v1alpha1.Operation{Sync: &opCopy, InitiatedBy: initiatedBy}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&operation)
	if err != nil {
		return nil, err
	}
	recorded, err := c.recordOperation(ctx, app, content)
	if err != nil {
		return nil, err
	}
	key := appKey(app.Namespace, app.Name)
	c.mu.Lock()
	c.pending[key] = recordedOperation{uid: recorded.GetUID(), generation: recorded.GetGeneration(), operation: operation}
	c.mu.Unlock()
	return &v1alpha1.OperationState{
		Operation:          operation,
		Phase:              v1alpha1.OperationRunning,
		Message:            "sync requested: recorded on the Application; the leader runs it",
		StartedAt:          metav1.Now(),
		ObservedGeneration: recorded.GetGeneration(),
	}, nil
}

// recordOperation writes operation (unstructured content) into app's
// operation field and returns the updated object. One request in the common
// case: a merge patch conditioned on the resourceVersion the informer has,
// which holds no operation; a conflict (the cache was behind) falls back to
// read-modify-write.
//
// Errors: ErrOperationInProgress when the Application records an operation;
// API errors as they come.
func (c *Controller) recordOperation(ctx context.Context, app *v1alpha1.Application, operation map[string]any) (*unstructured.Unstructured, error) {
	client := c.client.Namespace(app.Namespace)
	if cached := c.get(appKey(app.Namespace, app.Name)); cached != nil && cached.Operation == nil && cached.ResourceVersion != "" {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cached.ResourceVersion}, "operation": operation})
		if err != nil {
			return nil, err
		}
		recorded, err := client.Patch(ctx, app.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: syncer.FieldManager})
		if !apierrors.IsConflict(err) {
			return recorded, err
		}
	}
	var recorded *unstructured.Unstructured
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := client.Get(ctx, app.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if existing, found, _ := unstructured.NestedFieldNoCopy(u.Object, "operation"); found && existing != nil {
			return ErrOperationInProgress
		}
		u.Object["operation"] = operation
		recorded, err = client.Update(ctx, u, metav1.UpdateOptions{FieldManager: syncer.FieldManager})
		return err
	})
	return recorded, err
}

// ApplicationStatus returns the Application's status as the informer has it
// (the leader writes it); the zero status when it is unknown.
func (c *Controller) ApplicationStatus(namespace, name string) v1alpha1.ApplicationStatus {
	app := c.get(appKey(namespace, name))
	if app == nil {
		return v1alpha1.ApplicationStatus{Sync: v1alpha1.SyncStatus{Status: v1alpha1.SyncStatusCodeUnknown}}
	}
	if app.Status.Sync.Status == "" {
		app.Status.Sync.Status = v1alpha1.SyncStatusCodeUnknown
	}
	return app.Status
}

// Trigger implements PushTargets: it records an automated sync of app, if
// it is automated, for the leader to run. It returns ErrOperationInProgress
// when an operation is recorded already, and Start's errors.
func (c *Controller) Trigger(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error {
	op, ok := automatedSync(app)
	if !ok {
		return nil
	}
	_, err := c.Start(ctx, app, nil, op, initiatedBy(push))
	return err
}
