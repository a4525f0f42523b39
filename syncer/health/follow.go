package health

import (
	"context"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// rewatchPause is the pause before a watch that ended is opened again.
const rewatchPause = 100 * time.Millisecond

// Follow follows one object, name in ri (a dynamic client of its resource
// and namespace, acting as whoever must read it), until done returns true
// for what it sees (nil: the object does not exist), ctx ends (ctx.Err()) or
// a request fails (that error). With rv "" it first reads the object ("get"
// on its name; for a missing one, a "list" by name for the
// resourceVersion) to learn its state and where to watch from; otherwise it
// watches ("watch" with fieldSelector metadata.name, which kube-apiserver
// authorizes on that name) from rv, the resourceVersion the caller last saw
// it at. A watch that expired (410) starts again from a read; one that ends
// is opened again after a short pause. Waiting costs one watch event after
// the change, never a poll interval.
func Follow(ctx context.Context, ri dynamic.ResourceInterface, name, rv string, done func(*unstructured.Unstructured) bool) error {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	for ctx.Err() == nil {
		if rv == "" {
			live, err := ri.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				if done(nil) {
					return nil
				}
				if rv, err = currentRV(ctx, ri, selector); err != nil {
					return err
				}
				live = nil
			case err == nil:
				rv = live.GetResourceVersion()
			default:
				return err
			}
			if done(live) {
				return nil
			}
		}
		w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
				continue
			}
			return err
		}
		finished, next := follow(w, rv, done)
		w.Stop()
		if finished {
			return nil
		}
		rv = next
		// A watch that ends at once must not spin.
		t := time.NewTimer(rewatchPause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return ctx.Err()
}

// follow reads one watch until done, its end, or an error event; it
// returns whether done was reached and where to watch from next ("" after
// an expired resourceVersion: list again).
func follow(w watch.Interface, rv string, done func(*unstructured.Unstructured) bool) (bool, string) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = u.GetResourceVersion()
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Deleted:
				u = nil
			}
			if done(u) {
				return true, rv
			}
		case watch.Error:
			if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) || statusCode(st) == http.StatusGone {
				return false, ""
			}
			return false, rv
		}
	}
	return false, rv
}

func statusCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

// currentRV is where to watch from for an object that does not exist: a
// list by name (authorized as "list" on that name) returns the current
// resourceVersion.
func currentRV(ctx context.Context, ri dynamic.ResourceInterface, selector string) (string, error) {
	list, err := ri.List(ctx, metav1.ListOptions{FieldSelector: selector, Limit: 1})
	if err != nil {
		return "", err
	}
	return list.GetResourceVersion(), nil
}
