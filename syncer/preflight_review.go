package syncer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/syncer/permissions"
)

// This file asks kube-apiserver the preflight's questions: one
// SelfSubjectAccessReview per (verb, resource, namespace) as the identity,
// then, behind a denied one, one per name (see preflight.go).

// runChecks asks every check and returns what is missing.
func (op *operation) runChecks(ctx context.Context, cl *clients, checks []*permCheck) ([]missingPermission, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	limit := op.e.opts.Parallelism
	var (
		mu       sync.Mutex
		firstErr error
	)
	setErr := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}

	// 1. One review per (verb, resource, namespace), for every name.
	allowed := make([]bool, len(checks))
	parallel(len(checks), limit, func(i int) {
		c := checks[i]
		ok, err := cl.can(ctx, c.verb, c.group, c.resource, c.namespace, "")
		if err != nil {
			setErr(reviewError(cl.who, c, err))
			return
		}
		allowed[i] = ok
	}, func(i int, r any) { setErr(fmt.Errorf("internal error while checking permissions: %v", r)) })
	if firstErr != nil {
		return nil, firstErr
	}

	// 2. Names behind a denied check, one by one.
	type nameTask struct{ check, idx int }
	var tasks []nameTask
	for i, c := range checks {
		if !allowed[i] {
			for j := range c.names {
				tasks = append(tasks, nameTask{i, j})
			}
		}
	}
	nameDenied := make([]bool, len(tasks))
	parallel(len(tasks), limit, func(t int) {
		c := checks[tasks[t].check]
		ok, err := cl.can(ctx, c.verb, c.group, c.resource, c.namespace, c.names[tasks[t].idx])
		if err != nil {
			setErr(reviewError(cl.who, c, err))
			return
		}
		nameDenied[t] = !ok
	}, func(i int, r any) { setErr(fmt.Errorf("internal error while checking permissions: %v", r)) })
	if firstErr != nil {
		return nil, firstErr
	}

	// 3. A denied create is not needed for an object that exists (unless
	// it is deleted and created again: recreated).
	needed := make([]bool, len(tasks))
	parallel(len(tasks), limit, func(t int) {
		if !nameDenied[t] {
			return
		}
		c := checks[tasks[t].check]
		if c.verb != "create" || c.recreated[c.names[tasks[t].idx]] {
			needed[t] = true
			return
		}
		exists, err := cl.exists(ctx, c.gvr, c.namespace, c.names[tasks[t].idx])
		needed[t] = err != nil || !exists
	}, func(i int, r any) { setErr(fmt.Errorf("internal error while checking permissions: %v", r)) })
	if firstErr != nil {
		return nil, firstErr
	}

	var missing []missingPermission
	perCheck := map[int][]int{}
	for t, task := range tasks {
		if needed[t] {
			perCheck[task.check] = append(perCheck[task.check], task.idx)
		}
	}
	for i, c := range checks {
		if allowed[i] {
			continue
		}
		m := missingPermission{Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.namespace}
		if len(c.names) == 0 {
			m.Objects = c.objects
			missing = append(missing, m)
			continue
		}
		idx := perCheck[i]
		if len(idx) == 0 {
			continue
		}
		for _, j := range idx {
			m.Names = append(m.Names, c.names[j])
			m.Objects = append(m.Objects, c.objects[j])
		}
		if len(idx) == len(c.names) {
			// Nothing of this kind is allowed: grant it for every name.
			m.Names = nil
		}
		missing = append(missing, m)
	}
	return missing, nil
}

// can asks kube-apiserver, as the identity, whether it may do verb.
func (cl *clients) can(ctx context.Context, verb, group, resource, namespace, name string) (bool, error) {
	r, err := cl.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: group, Resource: resource, Name: name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

func reviewError(who string, c *permCheck, err error) error {
	msg := fmt.Sprintf("preflight: cannot ask kube-apiserver whether %s may %s %s: %v", who, c.verb, permissions.ResourceString(c.group, c.resource), err)
	if apierrors.IsForbidden(err) {
		msg += "; the identity must be allowed to create SelfSubjectAccessReviews (every authenticated user is, through system:basic-user, " +
			"and deputy's impersonation gate allows sync identities to create them as the ServiceAccount)"
	}
	return errors.New(msg)
}
