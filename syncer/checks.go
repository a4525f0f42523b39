package syncer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fmt"
	"strings"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds the checks of an Application that need no cluster, with
// Argo CD's messages: its source repository and destination against its
// project (the rules are policy.CompiledProject's: Argo CD
// AppProject.IsSourcePermitted and isDestinationMatched) and its
// syncOptions. Whether deputy renders the source at all (Helm) is
// source.CheckSupported. Kind checks need the cluster's discovery and live
// in plan.go.

// checkSource reports an Application whose repository the project does not
// permit (policy.CompiledProject.SourcePermitted), with Argo CD's message.
func checkSource(c *policy.CompiledProject, src v1alpha1.ApplicationSource) error {
	if c.SourcePermitted(src.RepoURL) {
		return nil
	}
	return fmt.Errorf("application repo %s is not permitted in project '%s': add it (or a glob matching it) to the AppProject's spec.sourceRepos", src.RepoURL, c.Name())
}

// checkDestination reports a destination the project does not permit, with
// Argo CD's message. server is the resolved server URL; name the cluster name
// when the Application gave one.
func checkDestination(c *policy.CompiledProject, projectName, server, name, namespace string) error {
	if c.DestinationPermitted(server, name, namespace) {
		return nil
	}
	return fmt.Errorf("application destination server '%s' and namespace '%s' do not match any of the allowed destinations in project '%s': add the destination to the AppProject's spec.destinations", server, namespace, projectName)
}

// syncOptions are the Application-level syncOptions deputy understands
// (Argo CD's spelling): CreateNamespace=true, Prune=false,
// PrunePropagationPolicy=foreground|background|orphan. PruneLast=true,
// ServerSideApply=true and ApplyOutOfSyncOnly=true are what deputy always
// does (prune runs after the last wave; every apply is server-side; objects
// unchanged since deputy applied them are not sent); options deputy does not
// implement are ignored, as Argo CD ignores unknown ones.
type syncOptions struct {
	createNamespace bool
	pruneDisabled   bool
	// propagation is prune's deletion propagation; Background unless
	// PrunePropagationPolicy says otherwise (Argo CD defaults to
	// foreground, which leaves an object in place until the garbage
	// collector removed its dependents, and for ever where none runs).
	propagation metav1.DeletionPropagation
}

func parseSyncOptions(p *v1alpha1.SyncPolicy) syncOptions {
	o := syncOptions{propagation: metav1.DeletePropagationBackground}
	if p == nil {
		return o
	}
	for _, opt := range p.SyncOptions {
		k, v, _ := strings.Cut(strings.TrimSpace(opt), "=")
		switch {
		case k == "CreateNamespace" && strings.EqualFold(v, "true"):
			o.createNamespace = true
		case k == "Prune" && strings.EqualFold(v, "false"):
			o.pruneDisabled = true
		case k == "PrunePropagationPolicy" && strings.EqualFold(v, "foreground"):
			o.propagation = metav1.DeletePropagationForeground
		case k == "PrunePropagationPolicy" && strings.EqualFold(v, "orphan"):
			o.propagation = metav1.DeletePropagationOrphan
		}
	}
	return o
}
