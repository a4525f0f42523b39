package tokenreview

import (
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/policy/v1alpha1"
)

// ProjectIdentity is the AppProject and role a project token was issued for.
type ProjectIdentity struct {
	Namespace, Name, Role string
}

// String is "NAMESPACE/NAME".
func (p ProjectIdentity) String() string { return p.Namespace + "/" + p.Name }

// ProjectOf reports whether u is restricted to one AppProject, as the users
// of project tokens are: ok is true whenever u carries the user extra
// deputy.dev/project, and then id is the project it names. A malformed value
// (not exactly one "NAMESPACE/NAME") yields ok=true and a zero id, which
// matches no project: the restriction fails closed.
func ProjectOf(u user.Info) (id ProjectIdentity, ok bool) {
	if u == nil {
		return ProjectIdentity{}, false
	}
	extra := u.GetExtra()
	vals, ok := extra[ExtraProject]
	if !ok {
		return ProjectIdentity{}, false
	}
	if len(vals) != 1 {
		return ProjectIdentity{}, true
	}
	ns, name, found := strings.Cut(vals[0], "/")
	if !found || ns == "" || name == "" || strings.Contains(name, "/") {
		return ProjectIdentity{}, true
	}
	id = ProjectIdentity{Namespace: ns, Name: name}
	if roles := extra[ExtraProjectRole]; len(roles) == 1 {
		id.Role = roles[0]
	}
	return id, true
}

// CheckProjectScope returns nil when u may act on app as far as projects are
// concerned: u is not restricted to a project (ProjectOf), or project, the
// AppProject app uses (policy.ResolveAppProject: in a project namespace, the
// Application's namespace admitted by its sourceNamespaces), is u's project.
// Otherwise it returns the reason to refuse with 403, naming both projects; a
// nil app (unknown Application) or a nil project (app may use none) is
// refused too, so a project token cannot probe for other projects'
// Applications.
//
// It only restricts: authorization (RBAC on the token's user
// deputy:project:NAMESPACE/NAME:ROLE or group deputy:project:NAMESPACE/NAME)
// must still allow the request.
func CheckProjectScope(u user.Info, app *v1alpha1.Application, project *v1alpha1.AppProject) error {
	id, restricted := ProjectOf(u)
	if !restricted {
		return nil
	}
	if id.Name == "" {
		return fmt.Errorf("user %q carries a malformed %s user extra: it may act on no Application", u.GetName(), ExtraProject)
	}
	if app == nil {
		return fmt.Errorf("the project token of AppProject %q may only act on Applications of that project", id.String())
	}
	if project != nil && project.Namespace == id.Namespace && project.Name == id.Name {
		return nil
	}
	belongs := fmt.Sprintf("names AppProject %q, which it may not use", app.Spec.Project)
	if project != nil {
		belongs = fmt.Sprintf("belongs to AppProject %q", project.Namespace+"/"+project.Name)
	}
	return fmt.Errorf("the project token of AppProject %q may only act on Applications of that project; Application %q %s",
		id.String(), app.Namespace+"/"+app.Name, belongs)
}
