package syncer

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"deputy.dev/deputy/syncer/health"
	"deputy.dev/deputy/syncer/permissions"
	"deputy.dev/deputy/syncer/waves"
)

// The preflight asks kube-apiserver, before anything is written, whether the
// operation's identity may make every request the operation will make, and
// reports everything missing at once, prune's permissions included (where
// prune may not list yet, "delete" there is asked too), with RBAC objects
// that grant everything the operation needs (neededPermissions): applying
// them replaces an earlier suggestion and converges in one step.
//
// What is asked, per object, mirrors what kube-apiserver authorizes (see
// k8s.io/apiserver/pkg/endpoints/handlers/patch.go): a server-side apply is
// a PATCH, authorized as "patch" on the object's name; when the object does
// not exist yet the same request also needs "create" on that name. "get" is
// not needed to apply, but seeing the object's tracking annotation is (see
// Ownership below): "list" of its (resource, namespace), or else "get" of it. Waiting for a CustomResourceDefinition to be
// Established is a "get" of it; CreateNamespace=true is a plain "create
// namespaces" when the namespace is missing; prune is "list" of every
// (resource, namespace) it looks in and "delete" of each object it would
// delete.
//
// The questions are SelfSubjectAccessReviews made as the identity
// (impersonated): they answer for that identity through every authorizer of
// the apiserver, deputy's included, and never need a SubjectAccessReview
// grant for the controller. A review per (verb, resource, namespace) comes
// first; only when one is denied are the objects behind it asked about by
// name (a Role may grant by resourceNames). This file decides what to ask;
// package permissions asks it (Review, through asker) and reports.
//
// Which objects exist comes from lists (metadata only) of every (resource,
// namespace) the sync writes to, when the identity may list there: "create"
// is then asked for exactly the missing objects, and objects that are
// unchanged since deputy applied them need nothing (they are not sent
// again). Where it may not list, each rendered object is read (a metadata
// GET, as the identity): "create" is then asked for the missing ones only.
//
// Ownership (Argo CD's shared-resource rule, failing rather than warning):
// an object whose live TrackingAnnotation names another Application is not
// applied and not pruned; that resource fails (SyncFailed) naming the other
// Application, and the operation goes on with the rest. Objects without the
// annotation are adopted. The lists and reads above show the annotation; an
// object the identity may neither list nor read cannot be checked, so "get"
// on it is reported missing and nothing is applied blind.

var (
	gvrNamespaces      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrServiceAccounts = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	gvrCRDs            = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// asker asks the preflight's questions (permissions.Review) as the
// operation's identity.
type asker struct{ cl *clients }

func (a asker) Can(ctx context.Context, verb, group, resource, namespace, name string) (bool, error) {
	return permissions.SelfSubjectAccess(ctx, a.cl.kube, verb, group, resource, namespace, name)
}

func (a asker) Exists(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (bool, error) {
	return a.cl.exists(ctx, gvr, namespace, name)
}

func (a asker) Who() string { return a.cl.who }

// missingPermission is a permission the identity lacks (or needs).
type missingPermission = permissions.Permission

// preflightResult is what the preflight learnt for the later phases.
type preflightResult struct {
	// createNamespace: the destination namespace is missing and
	// CreateNamespace=true will create it.
	createNamespace bool
	// candidates are the objects prune would delete.
	candidates []*pruneCandidate
	// trackedBy are the rendered objects another Application tracks, with
	// that Application ("NAMESPACE/NAME"): apply fails them, untouched.
	trackedBy map[objKey]string
	// live is what the lists and reads found of the rendered objects.
	live map[objKey]*liveObject
}

// preflightError is a failed preflight: the permissions missing, and the
// problems that kept it from asking or looking.
type preflightError struct {
	who      string
	missing  []missingPermission
	problems []string
	// needed is every permission the operation needs, the missing ones
	// included: what the suggested RBAC objects grant.
	needed  []missingPermission
	appNS   string
	appName string
}

func (e *preflightError) Error() string {
	return permissions.Report(e.who, e.appNS, e.appName, e.missing, e.problems, e.needed)
}

// preflight checks the ServiceAccount and every permission of the plan. It
// first lists (metadata only) every (resource, namespace) the rendered
// objects live in and every prune scope: the lists tell which objects exist
// (so "create" is asked for exactly the missing ones), which are unchanged
// since deputy applied them (no request is sent for those, and none is
// asked about), which another Application tracks (those fail, untouched),
// and what prune would delete. Listing is required for prune only; where the
// identity may not list, each rendered object is read instead (readUnlisted),
// and one it may not read either is reported as missing "get".
func (op *operation) preflight(ctx context.Context, cl *clients, id identity, p *plan) (*preflightResult, error) {
	res := &preflightResult{}
	if id.username != "" {
		if err := op.checkServiceAccount(ctx, cl, id.username); err != nil {
			return nil, err
		}
	}

	scopes := listTargets(p)
	var lists permissions.Set
	for _, s := range scopes {
		what := "to see which objects of " + s.gvk.Kind + " exist"
		if s.prune {
			what = "prune: objects of " + s.gvk.Kind + " tracked as " + op.tracking
		}
		lists.Add("list", s.gvr, s.namespace, "", what)
	}
	listMissing, err := permissions.Review(ctx, asker{cl}, lists.Checks(), op.e.opts.Parallelism)
	if err != nil {
		return nil, err
	}
	denied := map[scopeKey]bool{}
	for _, m := range listMissing {
		denied[scopeKey{m.Group, m.Resource, m.Namespace}] = true
	}
	var missing []missingPermission
	var listable []listTarget
	for _, s := range scopes {
		if !denied[s.key()] {
			listable = append(listable, s)
		}
	}
	for _, m := range listMissing {
		for _, s := range scopes {
			if s.prune && s.key() == (scopeKey{m.Group, m.Resource, m.Namespace}) {
				missing = append(missing, m)
				break
			}
		}
	}
	seen, problems := op.observe(ctx, cl, listable, p.rendered)
	res.candidates = seen.candidates
	res.live = seen.live
	read, readMissing, readProblems := op.readUnlisted(ctx, cl, p, seen)
	missing = append(missing, readMissing...)
	problems = append(problems, readProblems...)

	var checks permissions.Set
	for _, o := range p.objects {
		sk := scopeKey{o.gvr.Group, o.gvr.Resource, o.namespace()}
		known := seen.listed[sk] || read[o.key] // whether it exists, and its metadata
		live := seen.live[o.key]
		if other := live.trackedByOther(op.tracking); other != "" {
			if res.trackedBy == nil {
				res.trackedBy = map[objKey]string{}
			}
			res.trackedBy[o.key] = other
			continue // never sent: it needs no permission
		}
		if !o.hook && known && live.unchangedFrom(o.digest) {
			o.unchanged = true
			if live.health == nil && op.readsHealth(o) {
				checks.Add("get", o.gvr, o.namespace(), o.name(), o.key.String()+" (to read its health)")
				checks.Add("watch", o.gvr, o.namespace(), o.name(), o.key.String()+" (to wait until it is healthy)")
			}
			continue
		}
		op.objectChecks(o, known, live, checks.Add)
	}
	if p.createNamespace != "" {
		exists, err := cl.exists(ctx, gvrNamespaces, "", p.createNamespace)
		if err != nil && !apierrors.IsForbidden(err) {
			problems = append(problems, fmt.Sprintf("cannot tell whether namespace %s exists: %v", p.createNamespace, err))
		}
		if !exists {
			res.createNamespace = true
			checks.Add("create", gvrNamespaces, "", "", "Namespace "+p.createNamespace+" (syncOptions CreateNamespace=true)")
		}
	}
	for _, c := range res.candidates {
		checks.Add("delete", c.scope.gvr, c.namespace, c.name, c.key().String()+" (prune)")
	}
	// Where prune may not list, what it would delete is not known yet; ask
	// for "delete" there now rather than in the next report.
	for _, s := range scopes {
		if !s.prune || !denied[s.key()] {
			continue
		}
		what := "prune: objects of " + s.gvk.Kind + " tracked as " + op.tracking
		if s.namespace != "" {
			checks.Add("delete", s.gvr, s.namespace, "", what)
			continue
		}
		for _, name := range op.expectedPruneNames(s, p) {
			checks.Add("delete", s.gvr, "", name, s.gvk.Kind+" "+name+" (prune: recorded by the last sync, no longer rendered)")
		}
	}
	more, err := permissions.Review(ctx, asker{cl}, checks.Checks(), op.e.opts.Parallelism)
	if err != nil {
		return nil, err
	}
	missing = append(missing, more...)
	if len(missing) > 0 || len(problems) > 0 {
		permissions.Sort(missing)
		return nil, &preflightError{who: cl.who, missing: missing, problems: problems,
			needed: op.neededPermissions(p, res, scopes), appNS: op.app.Namespace, appName: op.app.Name}
	}
	return res, nil
}

// expectedPruneNames are the objects of a cluster-scoped prune scope that
// the last operation recorded and that are not rendered now: what prune will
// most likely find there, for when the identity may not list it yet.
func (op *operation) expectedPruneNames(s listTarget, p *plan) []string {
	var names []string
	for _, r := range previousResults(op.app) {
		if r.Group == s.gvk.Group && r.Kind == s.gvk.Kind && r.Namespace == "" && r.Name != "" &&
			!p.rendered[objKey{group: r.Group, kind: r.Kind, name: r.Name}] {
			names = append(names, r.Name)
		}
	}
	sort.Strings(names)
	return names
}

// neededPermissions is everything the operation needs, whether the identity
// has it or not, for the suggested RBAC objects: granting all of it (they
// replace an earlier version of themselves) makes the whole operation pass
// in one step, where granting only what is missing would take away what an
// earlier suggestion granted. Per (resource, namespace) of the rendered
// objects: get and list (to see which exist and which Application tracks
// them), create and patch (server-side apply); get of each
// CustomResourceDefinition applied (to wait until it is Established); create
// namespaces for CreateNamespace=true when the namespace is missing; with
// prune, list of every prune scope and delete there. Objects another
// Application tracks are never sent and need nothing.
//
// Namespaced permissions are for every name in their namespace (the objects
// of an Application change with its source; the Role is limited to the
// namespace); cluster-scoped ones name their objects (resourceNames), except
// where the request carries no name: list, and create of a Namespace.
func (op *operation) neededPermissions(p *plan, res *preflightResult, scopes []listTarget) []missingPermission {
	var need permissions.Grants
	for _, s := range scopes {
		switch {
		case s.prune:
			need.Add("list", s.gvr.Group, s.gvr.Resource, s.namespace, "")
			if s.namespace != "" {
				need.Add("delete", s.gvr.Group, s.gvr.Resource, s.namespace, "")
			} else {
				for _, name := range op.expectedPruneNames(s, p) {
					need.Add("delete", s.gvr.Group, s.gvr.Resource, "", name)
				}
			}
		case s.namespace != "":
			need.Add("list", s.gvr.Group, s.gvr.Resource, s.namespace, "")
		}
	}
	for _, c := range res.candidates {
		need.Add("delete", c.scope.gvr.Group, c.scope.gvr.Resource, c.namespace, c.name)
	}
	for _, o := range p.objects {
		if res.trackedBy[o.key] != "" {
			continue
		}
		if !o.generated {
			need.Add("get", o.gvr.Group, o.gvr.Resource, o.namespace(), o.name())
		}
		op.objectChecks(o, false, nil, func(verb string, gvr schema.GroupVersionResource, namespace, name, _ string) {
			if verb == permissions.VerbRecreate {
				verb = "create"
			}
			need.Add(verb, gvr.Group, gvr.Resource, namespace, name)
		})
	}
	if res.createNamespace {
		need.Add("create", gvrNamespaces.Group, gvrNamespaces.Resource, "", "")
	}
	out := need.List()
	permissions.Sort(out)
	return out
}

// readUnlisted reads (metadata GET, as the identity) every rendered object in
// a scope the lists did not cover, to see whether it exists and which
// Application tracks it; what it finds goes into seen.live. read holds the
// objects whose state is now known (found or not found). An object the
// identity may not read either cannot be checked for another Application's
// tracking annotation: "get" on it is returned as missing. Objects of kinds
// this sync's own CustomResourceDefinitions define are not served yet, so
// none exists. Other read errors are problems.
func (op *operation) readUnlisted(ctx context.Context, cl *clients, p *plan, seen *observed) (read map[objKey]bool, missing []missingPermission, problems []string) {
	var todo []*planObject
	for _, o := range p.objects {
		if !o.crdDefined && !o.generated && !seen.listed[scopeKey{o.gvr.Group, o.gvr.Resource, o.namespace()}] {
			todo = append(todo, o)
		}
	}
	read = map[objKey]bool{}
	var (
		mu        sync.Mutex
		forbidden permissions.Set
	)
	parallel(len(todo), op.e.opts.Parallelism, func(i int) {
		o := todo[i]
		m, err := cl.meta.Resource(o.gvr).Namespace(o.namespace()).Get(ctx, o.name(), metav1.GetOptions{})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			read[o.key] = true
			seen.live[o.key] = liveFrom(m)
		case apierrors.IsNotFound(err):
			read[o.key] = true
		case apierrors.IsForbidden(err):
			forbidden.Add("get", o.gvr, o.namespace(), o.name(), o.key.String()+" (to check its tracking annotation)")
		default:
			problems = append(problems, fmt.Sprintf("cannot read %s to see whether another Application tracks it: %v", o.key, err))
		}
	}, func(i int, r any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf("internal error while reading %s: %v", todo[i].key, r))
	})
	for _, c := range forbidden.Checks() {
		c.SortNames() // reads finish in any order
		missing = append(missing, missingPermission{Verb: c.Verb, Group: c.Group, Resource: c.Resource, Namespace: c.Namespace,
			Names: c.Names, Objects: c.Objects})
	}
	sort.Strings(problems)
	return read, missing, problems
}

// checkServiceAccount makes sure the derived ServiceAccount exists. This is
// the one request of an operation made as the controller identity rather
// than the ServiceAccount: impersonating a ServiceAccount that does not
// exist succeeds (kube-apiserver does not look it up, and RBAC still binds
// by name), so only a read of the ServiceAccount object can tell; the
// ServiceAccount itself usually may not read ServiceAccounts. When the
// controller identity may not read it either, the ServiceAccount is asked;
// when neither may, the check is skipped (logged) and the permission checks
// that follow still decide.
func (op *operation) checkServiceAccount(ctx context.Context, cl *clients, username string) error {
	ns, name, ok := strings.Cut(strings.TrimPrefix(username, "system:serviceaccount:"), ":")
	if !ok || !strings.HasPrefix(username, "system:serviceaccount:") {
		return nil
	}
	notFound := fmt.Errorf("ServiceAccount %s/%s, which AppProject %q derives for this destination, does not exist: create it (kubectl create serviceaccount %s -n %s) and grant it what the sync needs, or fix the AppProject's destinationServiceAccounts; nothing was changed",
		ns, name, op.project.Name, name, ns)
	_, err := cl.controller.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return notFound
	case !apierrors.IsForbidden(err):
		return fmt.Errorf("failed to check that ServiceAccount %s/%s exists: %w", ns, name, err)
	}
	exists, err2 := cl.exists(ctx, gvrServiceAccounts, ns, name)
	switch {
	case err2 == nil && exists:
		return nil
	case err2 == nil:
		return notFound
	}
	op.log.Info("cannot verify that the ServiceAccount exists: neither the controller identity nor the ServiceAccount may read it; the permission checks decide",
		"serviceAccount", ns+"/"+name, "controllerError", err.Error())
	return nil
}

// readsHealth reports whether the sync may have to read o back: a hook
// (until it completes), or an object that may not be Healthy once applied
// (health.MayWait), outside a dry run.
func (op *operation) readsHealth(o *planObject) bool {
	return !op.req.Sync.DryRun && (o.hook || health.MayWait(o.obj))
}

// objectChecks adds what sending o needs: a server-side apply is "patch" on
// its name, plus "create" on it when it may not exist yet (known: the
// preflight knows whether it exists; live: what it found); a generated hook
// is a "create" without a name. Waiting for its health is "watch" on its
// name (a generated hook's name is not known yet: every name), and a
// CustomResourceDefinition is read until Established ("get"). A hook whose
// previous object goes first (BeforeHookCreation) needs "delete" and "get"
// on it, and "create" (it is re-created); delete policies that remove it
// after it ran need "delete".
func (op *operation) objectChecks(o *planObject, known bool, live *liveObject, add func(verb string, gvr schema.GroupVersionResource, namespace, name, what string)) {
	what, name := o.key.String(), o.name()
	if o.generated {
		what = fmt.Sprintf("%s %s/%s* (generateName)", o.gvk.Kind, o.namespace(), o.obj.GetGenerateName())
		add("create", o.gvr, o.namespace(), "", what)
	} else {
		add("patch", o.gvr, o.namespace(), name, what)
		if !known || live == nil {
			add("create", o.gvr, o.namespace(), name, what)
		}
	}
	dry := op.req.Sync.DryRun
	if o.group == groupCRDs && !dry {
		add("get", gvrCRDs, "", name, what+" (to wait until it is Established)")
	}
	if op.readsHealth(o) {
		add("watch", o.gvr, o.namespace(), name, what+" (to wait until it is healthy)")
	}
	if !o.hook || dry {
		return
	}
	if !o.generated && (!known || live != nil || len(o.place.Phases) > 1) && o.place.HasPolicy(waves.BeforeHookCreation) {
		add("delete", o.gvr, o.namespace(), name, what+" (hook-delete-policy BeforeHookCreation: its previous object)")
		add("get", o.gvr, o.namespace(), name, what+" (to see its previous object gone)")
		if known && live != nil {
			// Deleted first, it is then created anew.
			add(permissions.VerbRecreate, o.gvr, o.namespace(), name, what+" (re-created after hook-delete-policy BeforeHookCreation)")
		}
	}
	if o.place.HasPolicy(waves.HookSucceeded) || o.place.HasPolicy(waves.HookFailed) {
		add("delete", o.gvr, o.namespace(), name, what+" (hook-delete-policy)")
	}
}
