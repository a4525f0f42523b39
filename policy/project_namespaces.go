package policy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds where AppProjects may be used from: Argo CD's
// AppProject.IsAppNamespacePermitted (argo-cd
// pkg/apis/application/v1alpha1/app_project_types.go, with util/glob
// MatchStringInList in its REGEXP mode) and the lookup of an Application's
// project in the project namespaces the operator configures (Argo CD's
// control-plane namespace, generalised to a list).

// sourceNamespaceMatcher is one compiled spec.sourceNamespaces entry.
type sourceNamespaceMatcher struct {
	re  *regexp.Regexp
	pat saPattern
	err error
}

func compileSourceNamespaces(list []string) []sourceNamespaceMatcher {
	out := make([]sourceNamespaceMatcher, len(list))
	for i, s := range list {
		if len(s) >= 2 && strings.HasPrefix(s, "/") && strings.HasSuffix(s, "/") {
			// Upstream compiles regexp2 (.NET syntax); RE2 covers what a
			// namespace pattern needs, and anything it cannot compile
			// matches nothing (fail closed; upstream logs and skips too).
			out[i].re, out[i].err = regexp.Compile(s[1 : len(s)-1])
			continue
		}
		out[i].pat, out[i].err = saCompilePattern(s)
	}
	return out
}

func (m *sourceNamespaceMatcher) match(ns string) bool {
	switch {
	case m.err != nil:
		return false
	case m.re != nil:
		return m.re.MatchString(ns)
	}
	ok, err := m.pat.match(ns)
	return ok && err == nil
}

// AppNamespacePermitted is Argo CD's AppProject.IsAppNamespacePermitted: an
// Application in the project's own namespace may use it, and one in another
// namespace only when spec.sourceNamespaces matches that namespace (an entry
// between slashes, "/^team-.*$/", is a regular expression, matched
// unanchored as upstream; any other entry is a glob without separators).
// Upstream's "an empty namespace means the control-plane namespace" does not
// arise: deputy's Applications always have a namespace.
func (c *CompiledProject) AppNamespacePermitted(appNamespace string) bool {
	if appNamespace == "" {
		return false
	}
	if appNamespace == c.namespace {
		return true
	}
	for i := range c.sourceNS {
		if c.sourceNS[i].match(appNamespace) {
			return true
		}
	}
	return false
}

// AllNamespacesPermitted reports whether the project permits every namespace
// of the cluster (server, or registered name) as a destination: an entry for
// the cluster whose namespace pattern matches everything ("*"), and no entry
// that could veto a namespace ("!" patterns). The impersonation gate asks it
// before letting a sync identity use a namespaced resource across all
// namespaces (a list or watch without a namespace).
func (c *CompiledProject) AllNamespacesPermitted(server, name string) bool {
	all := false
	for i := range c.dests {
		d := &c.dests[i]
		if d.namespace.deny || d.namespace.err != nil {
			return false
		}
		nameMatched := name != "" && d.name.match(name)
		serverMatched := server != "" && d.server.match(server)
		if (!nameMatched && d.name.deny) || (!serverMatched && d.server.deny) {
			return false
		}
		if (serverMatched || nameMatched) && d.namespace.pattern.any {
			all = true
		}
	}
	return all
}

// HasDestinationOn reports whether some destination of the project is on the
// cluster (server, or registered name), whatever its namespace, and no entry
// vetoes that cluster. A project with none grants nothing there, not even
// cluster-scoped kinds.
func (c *CompiledProject) HasDestinationOn(server, name string) bool {
	found := false
	for i := range c.dests {
		d := &c.dests[i]
		nameMatched := name != "" && d.name.match(name)
		serverMatched := server != "" && d.server.match(server)
		if (!nameMatched && d.name.deny) || (!serverMatched && d.server.deny) {
			return false
		}
		if serverMatched || nameMatched {
			found = true
		}
	}
	return found
}

// ErrProjectNotUsable is matched (errors.Is) by ResolveAppProject's errors
// for an Application whose project does not exist where projects may live, or
// does not admit the Application's namespace: the operation fails with the
// message; it is not a transient error.
var ErrProjectNotUsable = errors.New("AppProject not usable")

// ResolveAppProject finds the deputy.dev AppProject an Application names
// (spec.project), Argo CD's way: projects live only in projectNamespaces
// (the control-plane namespace upstream); an Application in one of them uses
// the project of its own namespace when it has one, otherwise the project of
// that name in the first project namespace that has one, and an Application
// in any other namespace may use it only when the project's
// spec.sourceNamespaces admits its namespace (AppNamespacePermitted).
// projectNamespaces ["*"] makes every namespace a project namespace (the
// Application's own namespace is searched, and only it). find returns the
// project namespace/name or nil.
//
// Errors (errors.Is ErrProjectNotUsable, each naming the project, the
// namespaces and the fix): no such project; a project that does not admit
// the Application's namespace; a project that does not compile.
func ResolveAppProject(app *v1alpha1.Application, projectNamespaces []string, find func(namespace, name string) *v1alpha1.AppProject) (*v1alpha1.AppProject, error) {
	name := app.Spec.Project
	key := app.Namespace + "/" + app.Name
	if slices.Contains(projectNamespaces, "*") {
		if p := find(app.Namespace, name); p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("%w: Application %q references AppProject %q, which does not exist in its namespace: create a deputy.dev AppProject named %q in namespace %q",
			ErrProjectNotUsable, key, name, name, app.Namespace)
	}
	var p *v1alpha1.AppProject
	if slices.Contains(projectNamespaces, app.Namespace) {
		p = find(app.Namespace, name)
	}
	for _, ns := range projectNamespaces {
		if p != nil {
			break
		}
		p = find(ns, name)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: Application %q references AppProject %q, which does not exist in the project namespaces (%s, sync.projectNamespaces): create a deputy.dev AppProject named %q there, or fix spec.project",
			ErrProjectNotUsable, key, name, strings.Join(projectNamespaces, ", "), name)
	}
	c, err := CompileAppProject(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: fix the AppProject", ErrProjectNotUsable, err)
	}
	if !c.AppNamespacePermitted(app.Namespace) {
		return nil, fmt.Errorf("%w: Application %q may not use AppProject %s/%s: namespace %q is not in the project's spec.sourceNamespaces; add it there (an operator decision), or move the Application into namespace %q",
			ErrProjectNotUsable, key, p.Namespace, p.Name, app.Namespace, p.Namespace)
	}
	return p, nil
}
