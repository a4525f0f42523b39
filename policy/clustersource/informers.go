package clustersource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// setupRBACInformers registers the four RBAC informers with the typed factory.
func (s *Source) setupRBACInformers() {
	s.factory = informers.NewSharedInformerFactory(s.clients.Kube, 0)
	rbac := func(resource string) string { return "rbac.authorization.k8s.io/v1 " + resource }
	s.rbac = []cache.SharedIndexInformer{
		s.factory.InformerFor(&rbacv1.Role{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("roles"), c, &rbacv1.Role{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().Roles("").List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().Roles("").Watch(ctx, o)
				})
		}),
		s.factory.InformerFor(&rbacv1.ClusterRole{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("clusterroles"), c, &rbacv1.ClusterRole{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().ClusterRoles().List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().ClusterRoles().Watch(ctx, o)
				})
		}),
		s.factory.InformerFor(&rbacv1.RoleBinding{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("rolebindings"), c, &rbacv1.RoleBinding{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().RoleBindings("").List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().RoleBindings("").Watch(ctx, o)
				})
		}),
		s.factory.InformerFor(&rbacv1.ClusterRoleBinding{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("clusterrolebindings"), c, &rbacv1.ClusterRoleBinding{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().ClusterRoleBindings().List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().ClusterRoleBindings().Watch(ctx, o)
				})
		}),
	}
}

// newInformer returns an informer over list and watch whose every call
// outcome is recorded under name for Status (the generated informers give no
// way to see that a list succeeded again after a failure), whose objects are
// stored without managedFields, and whose events only ask for a rebuild.
// project marks AppProject informers: a NotFound from them means the CRD was
// deleted, and triggers a discovery check.
func (s *Source) newInformer(name string, client any, exemplar runtime.Object, project bool,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, o)
			s.observe(ctx, name, "list", project, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			s.observe(ctx, name, "watch", project, err)
			return w, err
		},
	}, client)
	inf := cache.NewSharedIndexInformerWithOptions(lw, exemplar, cache.SharedIndexInformerOptions{ObjectDescription: name})
	// Neither fails before the informer starts.
	_ = inf.SetTransform(stripManagedFields)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		// A failed list or watch call was recorded above with its cause;
		// what is left is a watch that broke off after it started.
		if !s.failing(name) {
			s.observe(ctx, name, "keep watching", project, err)
		}
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.kick() },
		UpdateFunc: func(any, any) { s.kick() },
		DeleteFunc: func(any) { s.kick() },
	})
	return inf
}

// stripManagedFields drops what deputy never reads before objects enter the
// informer caches (a large share of their memory at 100k bindings).
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// observe records the outcome of a list or watch call: a success clears the
// informer's failure, an error sets it. Errors the reflector handles by
// itself (an expired resource version, a watch closed normally) and errors
// of a shutdown are not failures.
func (s *Source) observe(ctx context.Context, name, verb string, project bool, err error) {
	switch {
	case err == nil:
		s.setFailure(name, nil)
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
	default:
		s.setFailure(name, fmt.Errorf("failed to %s %s: %w", verb, name, err))
		if project && apierrors.IsNotFound(err) {
			select {
			case s.rediscover <- struct{}{}:
			default:
			}
		}
	}
}

func (s *Source) failing(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.failures[name]
	return ok
}

func (s *Source) setFailure(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failures, name)
		return
	}
	s.failures[name] = failure{err: err, at: time.Now()}
}
