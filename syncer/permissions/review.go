package permissions

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// The preflight's questions: what an operation needs (Checks, collected in
// a Set), and Review, which asks kube-apiserver through an Asker: one
// SelfSubjectAccessReview per (verb, resource, namespace) as the identity,
// then, behind a denied one, one per name. Package syncer decides what to
// ask (see its preflight.go).

// Check is one permission an operation needs.
type Check struct {
	Verb      string
	Group     string
	Resource  string
	Namespace string
	// GVR is used to look objects up (create checks).
	GVR schema.GroupVersionResource
	// Names are the objects (by name) needing it, with a description each
	// in Objects; none means the request itself carries no name (list, POST
	// create).
	Names   []string
	Objects []string
	// Recreated are names whose "create" is needed although the object
	// exists: it is deleted first (see VerbRecreate).
	Recreated map[string]bool
}

// VerbRecreate is what a Set is given for an object that exists and is
// deleted and then created again (a hook's BeforeHookCreation): asked as
// "create", and needed even though the object exists now (a denied create
// is otherwise dropped for existing objects, see Review).
const VerbRecreate = "re-create"

type checkKey struct{ verb, group, resource, namespace string }

// Set collects checks, one per (verb, group, resource, namespace). The zero
// value is ready to use.
type Set struct {
	order []*Check
	index map[checkKey]*Check
}

// Add adds what (a description of the object) needing verb on gvr in
// namespace ("" for cluster-scoped), for name ("": the request carries no
// name).
func (s *Set) Add(verb string, gvr schema.GroupVersionResource, namespace, name, what string) {
	recreate := verb == VerbRecreate
	if recreate {
		verb = "create"
	}
	if s.index == nil {
		s.index = map[checkKey]*Check{}
	}
	k := checkKey{verb, gvr.Group, gvr.Resource, namespace}
	c, ok := s.index[k]
	if !ok {
		c = &Check{Verb: verb, Group: gvr.Group, Resource: gvr.Resource, Namespace: namespace, GVR: gvr}
		s.index[k] = c
		s.order = append(s.order, c)
	}
	if recreate {
		if c.Recreated == nil {
			c.Recreated = map[string]bool{}
		}
		c.Recreated[name] = true
	}
	if name != "" {
		c.Names = append(c.Names, name)
		c.Objects = append(c.Objects, what)
	} else if what != "" && len(c.Objects) == 0 {
		c.Objects = append(c.Objects, what)
	}
}

// Checks returns the checks in the order they were first added.
func (s *Set) Checks() []*Check { return s.order }

// SortNames sorts c's names, keeping each object's description with its
// name (for names added in any order).
func (c *Check) SortNames() { sort.Sort(namesAndObjects{c}) }

type namesAndObjects struct{ c *Check }

func (s namesAndObjects) Len() int           { return len(s.c.Names) }
func (s namesAndObjects) Less(i, j int) bool { return s.c.Names[i] < s.c.Names[j] }
func (s namesAndObjects) Swap(i, j int) {
	s.c.Names[i], s.c.Names[j] = s.c.Names[j], s.c.Names[i]
	s.c.Objects[i], s.c.Objects[j] = s.c.Objects[j], s.c.Objects[i]
}

// Asker answers Review's questions as the operation's identity.
type Asker interface {
	// Can reports whether the identity may do verb on group/resource in
	// namespace, on name ("": every name), as a SelfSubjectAccessReview
	// answers (SelfSubjectAccess).
	Can(ctx context.Context, verb, group, resource, namespace, name string) (bool, error)
	// Exists reports whether the object exists.
	Exists(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (bool, error)
	// Who is the identity's username, for errors.
	Who() string
}

// Review asks every check, at most limit questions at a time, and returns
// what is missing: first one question per check, for every name; behind a
// denied one, one per name; a denied "create" of an object that exists is
// not needed (unless it is Recreated). A check denied for every name is
// missing for every name. The first error (a question kube-apiserver did
// not answer, or a panic) is returned, after the questions under way.
func Review(ctx context.Context, asker Asker, checks []*Check, limit int) ([]Permission, error) {
	if len(checks) == 0 {
		return nil, nil
	}

	// 1. One review per (verb, resource, namespace), for every name.
	allowed := make([]bool, len(checks))
	err := each(len(checks), limit, func(i int) error {
		c := checks[i]
		ok, err := asker.Can(ctx, c.Verb, c.Group, c.Resource, c.Namespace, "")
		if err != nil {
			return reviewError(asker.Who(), c, err)
		}
		allowed[i] = ok
		return nil
	})
	if err != nil {
		return nil, err
	}

	// 2. Names behind a denied check, one by one.
	type nameTask struct{ check, idx int }
	var tasks []nameTask
	for i, c := range checks {
		if !allowed[i] {
			for j := range c.Names {
				tasks = append(tasks, nameTask{i, j})
			}
		}
	}
	nameDenied := make([]bool, len(tasks))
	err = each(len(tasks), limit, func(t int) error {
		c := checks[tasks[t].check]
		ok, err := asker.Can(ctx, c.Verb, c.Group, c.Resource, c.Namespace, c.Names[tasks[t].idx])
		if err != nil {
			return reviewError(asker.Who(), c, err)
		}
		nameDenied[t] = !ok
		return nil
	})
	if err != nil {
		return nil, err
	}

	// 3. A denied create is not needed for an object that exists (unless
	// it is deleted and created again: recreated).
	needed := make([]bool, len(tasks))
	err = each(len(tasks), limit, func(t int) error {
		if !nameDenied[t] {
			return nil
		}
		c := checks[tasks[t].check]
		if c.Verb != "create" || c.Recreated[c.Names[tasks[t].idx]] {
			needed[t] = true
			return nil
		}
		exists, err := asker.Exists(ctx, c.GVR, c.Namespace, c.Names[tasks[t].idx])
		needed[t] = err != nil || !exists
		return nil
	})
	if err != nil {
		return nil, err
	}

	perCheck := map[int][]int{}
	for t, task := range tasks {
		if needed[t] {
			perCheck[task.check] = append(perCheck[task.check], task.idx)
		}
	}
	return missingOf(checks, allowed, perCheck), nil
}

// missingOf is what Review found missing: every check not allowed, with
// the names (and their objects) perCheck holds for it.
func missingOf(checks []*Check, allowed []bool, perCheck map[int][]int) []Permission {
	var missing []Permission
	for i, c := range checks {
		if allowed[i] {
			continue
		}
		m := Permission{Verb: c.Verb, Group: c.Group, Resource: c.Resource, Namespace: c.Namespace}
		if len(c.Names) == 0 {
			m.Objects = c.Objects
			missing = append(missing, m)
			continue
		}
		idx := perCheck[i]
		if len(idx) == 0 {
			continue
		}
		for _, j := range idx {
			m.Names = append(m.Names, c.Names[j])
			m.Objects = append(m.Objects, c.Objects[j])
		}
		if len(idx) == len(c.Names) {
			// Nothing of this kind is allowed: grant it for every name.
			m.Names = nil
		}
		missing = append(missing, m)
	}
	return missing
}

// each runs f for 0..n-1, at most limit (at least 1) at a time, and returns
// the first error; a panic in f is an error.
func each(n, limit int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(max(limit, 1))
	for i := range n {
		g.Go(func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("internal error while checking permissions: %v", r)
				}
			}()
			return f(i)
		})
	}
	return g.Wait()
}

// SelfSubjectAccess asks kube-apiserver, as kube's identity, whether it may
// do verb on group/resource in namespace, on name ("": every name): a
// SelfSubjectAccessReview.
func SelfSubjectAccess(ctx context.Context, kube kubernetes.Interface, verb, group, resource, namespace, name string) (bool, error) {
	r, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: group, Resource: resource, Name: name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

func reviewError(who string, c *Check, err error) error {
	msg := fmt.Sprintf("preflight: cannot ask kube-apiserver whether %s may %s %s: %v", who, c.Verb, ResourceString(c.Group, c.Resource), err)
	if apierrors.IsForbidden(err) {
		msg += "; the identity must be allowed to create SelfSubjectAccessReviews (every authenticated user is, through system:basic-user, " +
			"and deputy's impersonation gate allows sync identities to create them as the ServiceAccount)"
	}
	return errors.New(msg)
}
