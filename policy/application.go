package policy

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Application is a deputy.dev Application together with where it came from.
type Application struct {
	Object *v1alpha1.Application
	Source string
}

// ValidateApplication checks what a sync needs before it can start, with
// messages that name the field and the fix: metadata.name (a DNS-1123
// subdomain, as kube-apiserver requires of custom resources) and
// metadata.namespace, spec.project, spec.source or spec.sources
// (ApplicationSpec.ValidateSources: repoURL, a relative path inside the
// repository, helm's fields, refs and $REF value files), spec.syncPolicy's
// retry and healthTimeout (ApplicationSpec.ValidateSyncPolicy), and
// spec.destination with server or
// name (Argo CD accepts exactly one of the two). operation and status are
// written by deputy, never by the policy author. A nil Application has no
// errors.
//
// What needs the AppProject or the cluster (is the repository permitted, is the
// destination allowed, does the ServiceAccount exist) is checked by the sync
// engine when an operation runs, and reported in its status.
func ValidateApplication(a *v1alpha1.Application) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if a.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "an Application needs a name"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(a.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), a.Name, msg))
		}
	}
	errs = append(errs, validateNamespaceName(a.Namespace, true, meta.Child("namespace"))...)

	spec := field.NewPath("spec")
	if strings.TrimSpace(a.Spec.Project) == "" {
		errs = append(errs, field.Required(spec.Child("project"), "name the AppProject (deputy.dev, in the Application's namespace) that governs this Application"))
	}
	errs = append(errs, a.Spec.ValidateSources()...)
	errs = append(errs, a.Spec.ValidateSyncPolicy()...) // retry, healthTimeout
	dst := spec.Child("destination")
	switch d := a.Spec.Destination; {
	case d.Server == "" && d.Name == "":
		errs = append(errs, field.Required(dst.Child("server"), "set destination.server (the cluster's API server URL, e.g. https://kubernetes.default.svc) or destination.name (a cluster registered in sync.clusters)"))
	case d.Server != "" && d.Name != "":
		errs = append(errs, field.Invalid(dst.Child("name"), d.Name, "set destination.server or destination.name, not both (as Argo CD requires)"))
	}
	if d := a.Spec.Destination.Namespace; d != "" {
		errs = append(errs, validateNamespaceName(d, false, dst.Child("namespace"))...)
	}
	if a.Operation != nil {
		errs = append(errs, field.Forbidden(field.NewPath("operation"), "operation is written by deputy when a sync is requested; remove it (start a sync with `deputy sync NS/NAME`)"))
	}
	if a.Status.OperationState != nil || a.Status.Sync.Status != "" || a.Status.Sync.Revision != "" || len(a.Status.Sync.Revisions) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("status"), "status is written by deputy; remove it from the policy file"))
	}
	return errs
}

// Application returns the Application ns/name of the snapshot, or nil.
func (s *Snapshot) Application(namespace, name string) *Application {
	if s == nil {
		return nil
	}
	return s.applications[namespace+"/"+name]
}

// DeputyAppProject returns the deputy.dev AppProject ns/name of the snapshot,
// or nil. An Application's project is the deputy.dev AppProject named
// spec.project in the Application's own namespace.
func (s *Snapshot) DeputyAppProject(namespace, name string) *v1alpha1.AppProject {
	if s == nil {
		return nil
	}
	return deputyAppProject(s.Projects, namespace, name)
}

// DeputyAppProject returns the deputy.dev AppProject namespace/name read
// from the cluster, or nil (also for a nil state). The object is shared: do
// not modify it.
func (s *ClusterState) DeputyAppProject(namespace, name string) *v1alpha1.AppProject {
	if s == nil {
		return nil
	}
	return deputyAppProject(s.Projects, namespace, name)
}

func deputyAppProject(projects []Project, namespace, name string) *v1alpha1.AppProject {
	for _, p := range projects {
		if p.Group == v1alpha1.Group && p.Object.Namespace == namespace && p.Object.Name == name {
			return p.Object
		}
	}
	return nil
}

func indexApplications(apps []Application) map[string]*Application {
	if len(apps) == 0 {
		return nil
	}
	idx := make(map[string]*Application, len(apps))
	for i := range apps {
		a := &apps[i]
		idx[a.Object.Namespace+"/"+a.Object.Name] = a
	}
	return idx
}
