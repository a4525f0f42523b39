package syncer_test

import (
	"context"
	"fmt"
	"log"

	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/source"
)

// An Engine for the cluster deputy runs in, impersonating the ServiceAccount
// each AppProject derives (and failing syncs for which none is derived).
func ExampleEngine_Run() {
	cfg, err := rest.InClusterConfig() // deputy's own identity
	if err != nil {
		log.Fatal(err)
	}
	engine, err := syncer.NewEngine(syncer.EngineOptions{
		Clusters:      cluster.NewRegistry(cluster.InCluster(cfg)),
		Impersonation: syncer.ImpersonationSettings{Enabled: true, Enforced: true},
		Source:        source.Options{CacheDir: "/var/cache/deputy"},
	})
	if err != nil {
		log.Fatal(err)
	}
	var app *v1alpha1.Application    // from the cluster
	var project *v1alpha1.AppProject // app.spec.project, in app's namespace
	st := engine.Run(context.Background(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}},
		func(_ *v1alpha1.OperationState, r *v1alpha1.ResourceResult) {
			if r != nil {
				fmt.Printf("%s %s %s: %s\n", r.Kind, r.Name, r.Status, r.Message)
			}
		})
	fmt.Printf("%s as %s: %s\n", st.Phase, st.Identity, st.Message)
}
