package apps

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/equality"

	"deputy.dev/deputy/policy/v1alpha1"
)

// obsolete says why the operation this term runs for key is no longer the
// one the Application records, "" when it still is (or none runs): the
// Application was deleted (or created again: another UID), or its
// operation field was removed or holds another operation. A spec change
// keeps the operation (as sameOperation decides): its retry runs with the
// new spec.
func (c *Controller) obsolete(key string, app *v1alpha1.Application) string {
	c.mu.Lock()
	rec, ok := c.running[key]
	c.mu.Unlock()
	switch {
	case !ok:
		return ""
	case app == nil || app.UID != rec.uid:
		return reasonAppDeleted
	case app.Operation == nil:
		return "the operation was removed from the Application"
	case app.Generation != rec.generation && !equality.Semantic.DeepEqual(*app.Operation, rec.operation):
		return "another operation replaced it on the Application"
	}
	return ""
}

// retryTarget is OperationsOptions.BeforeRetry in cluster mode: the
// Application as the informer has it now and its AppProject, or why the
// retry is cancelled (obsolete, or the project is not usable).
func (c *Controller) retryTarget(namespace, name string) (*v1alpha1.Application, *v1alpha1.AppProject, error) {
	key := appKey(namespace, name)
	app := c.get(key)
	if reason := c.obsolete(key, app); reason != "" {
		return nil, nil, errors.New(reason)
	}
	if app == nil {
		return nil, nil, errors.New(reasonAppDeleted)
	}
	if app.DeletionTimestamp != nil {
		return nil, nil, errors.New(reasonAppDeleting)
	}
	project, err := c.opts.Projects(app)
	if err != nil {
		return nil, nil, err
	}
	return app, project, nil
}
