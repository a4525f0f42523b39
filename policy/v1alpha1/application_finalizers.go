package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Resources finalizers: an Application carrying one of them has its tracked
// resources deleted (cascading deletion) before the Application itself goes.
// Argo CD's spellings are honoured as Argo CD defines them
// (argoproj/argo-cd pkg/apis/application/v1alpha1/application_defaults.go:
// ResourcesFinalizerName, ForegroundPropagationPolicyFinalizer,
// BackgroundPropagationPolicyFinalizer; types.go GetPropagationPolicy), and
// deputy has its own, so that an Application can be finalized by deputy in
// a cluster where Argo CD also runs.
const (
	// ArgoCDResourcesFinalizer is Argo CD's ResourcesFinalizerName:
	// foreground propagation.
	ArgoCDResourcesFinalizer = "resources-finalizer.argocd.argoproj.io"
	// ArgoCDForegroundResourcesFinalizer is Argo CD's
	// ForegroundPropagationPolicyFinalizer.
	ArgoCDForegroundResourcesFinalizer = "resources-finalizer.argocd.argoproj.io/foreground"
	// ArgoCDBackgroundResourcesFinalizer is Argo CD's
	// BackgroundPropagationPolicyFinalizer.
	ArgoCDBackgroundResourcesFinalizer = "resources-finalizer.argocd.argoproj.io/background"
	// ResourcesFinalizer is deputy's own: foreground propagation.
	ResourcesFinalizer = "resources-finalizer.deputy.dev"
	// BackgroundResourcesFinalizer is deputy's own with background
	// propagation.
	BackgroundResourcesFinalizer = "resources-finalizer.deputy.dev/background"
)

// ResourcesFinalizerOf returns the first resources finalizer app carries
// (in metadata.finalizers order, as Argo CD's GetPropagationPolicy) with its
// index in metadata.finalizers and the deletion propagation it asks for
// (Foreground, or Background for the /background variants); ok is false
// when it carries none.
func ResourcesFinalizerOf(app *Application) (finalizer string, index int, propagation metav1.DeletionPropagation, ok bool) {
	if app == nil {
		return "", -1, "", false
	}
	for i, f := range app.Finalizers {
		switch f {
		case ArgoCDResourcesFinalizer, ArgoCDForegroundResourcesFinalizer, ResourcesFinalizer:
			return f, i, metav1.DeletePropagationForeground, true
		case ArgoCDBackgroundResourcesFinalizer, BackgroundResourcesFinalizer:
			return f, i, metav1.DeletePropagationBackground, true
		}
	}
	return "", -1, "", false
}
