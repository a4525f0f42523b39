package apps_test

import (
	"context"
	"fmt"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

func ExampleOperations() {
	// A Runner that syncs one Deployment; the Engine is the real one.
	runner := syncer.RunnerFunc(func(_ context.Context, req syncer.Request, progress syncer.Progress) *v1alpha1.OperationState {
		web := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced}
		progress(nil, web)
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Identity: "system:serviceaccount:guestbook:guestbook-deployer",
			SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc", Resources: []*v1alpha1.ResourceResult{web}}}
	})
	ops := apps.NewOperations(runner, apps.OperationsOptions{Workers: 4})
	defer ops.Shutdown(context.Background()) //nolint:errcheck // nothing runs any more

	app := &v1alpha1.Application{Spec: v1alpha1.ApplicationSpec{Project: "guestbook"}}
	app.Namespace, app.Name = "guestbook", "guestbook"
	project := &v1alpha1.AppProject{}
	project.Namespace, project.Name = "guestbook", "guestbook"

	ctx := context.Background()
	state, err := ops.Start(ctx, app, project, v1alpha1.SyncOperation{Prune: true}, v1alpha1.InitiatedBy{Username: "alice"})
	if err != nil {
		panic(err)
	}
	fmt.Println("started:", state.Phase)
	// Watch replays what is known, then follows the operation to its end.
	for ev := range ops.Watch(ctx, "guestbook", "guestbook") {
		if ev.Type == v1alpha1.OperationEventResource {
			fmt.Println(ev.Resource.Kind, ev.Resource.Namespace+"/"+ev.Resource.Name, ev.Resource.Status)
		}
		if ev.Type == v1alpha1.OperationEventState && ev.State.Phase != v1alpha1.OperationRunning {
			fmt.Println(ev.State.Phase, "as", ev.State.Identity)
		}
	}
	// Output:
	// started: Running
	// Deployment guestbook/web Synced
	// Succeeded as system:serviceaccount:guestbook:guestbook-deployer
}
