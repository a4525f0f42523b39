package livestate

import (
	"bytes"
	"cmp"
	"maps"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// statusSubresource is the managedFields subresource whose entries (a
// controller writing status) never call OnChange.
const statusSubresource = "status"

// handler is every scope's event handler: OnChange for the tracked objects
// added (not by the informer's first list), deleted, or changed in a way
// that can matter.
func (c *Cache) handler(s Scope) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				c.notify(s, obj)
			}
		},
		UpdateFunc: func(oldObj, newObj any) { c.onUpdate(s, oldObj, newObj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			c.notify(s, obj)
		},
	}
}

// notify calls OnChange for obj, seen in scope s, if it is tracked.
func (c *Cache) notify(s Scope, obj any) {
	if t := c.tracking(obj); t != "" {
		c.opts.OnChange(t, s)
	}
}

// onUpdate calls OnChange for an update that can matter of an object
// tracked before or after it (both values when the annotation changed),
// seen in scope s.
func (c *Cache) onUpdate(s Scope, oldObj, newObj any) {
	ot, nt := c.tracking(oldObj), c.tracking(newObj)
	if ot == "" && nt == "" {
		return
	}
	o, ok1 := oldObj.(metav1.Object)
	n, ok2 := newObj.(metav1.Object)
	if !ok1 || !ok2 || !Changed(o, n) {
		return
	}
	if nt != "" {
		c.opts.OnChange(nt, s)
	}
	if ot != "" && ot != nt {
		c.opts.OnChange(ot, s)
	}
}

// tracking is obj's tracking annotation ("" when it has none or is not an
// object).
func (c *Cache) tracking(obj any) string {
	o, ok := obj.(metav1.Object)
	if !ok {
		return ""
	}
	return o.GetAnnotations()[c.opts.TrackingAnnotation]
}

// Changed reports whether an update from before to after can matter to the
// Application managing the object: its annotations, labels, generation,
// deletionTimestamp or ownerReferences changed, or its managedFields
// entries other than those of the status subresource (compared by manager,
// operation, subresource, apiVersion and fields, not by time). A
// controller writing only status (or a resync: nothing changed) does not
// matter; an edit of the object's spec or data by any field manager does.
func Changed(before, after metav1.Object) bool {
	if before.GetGeneration() != after.GetGeneration() ||
		!maps.Equal(before.GetAnnotations(), after.GetAnnotations()) ||
		!maps.Equal(before.GetLabels(), after.GetLabels()) ||
		!before.GetDeletionTimestamp().Equal(after.GetDeletionTimestamp()) {
		return true
	}
	br, ar := before.GetOwnerReferences(), after.GetOwnerReferences()
	if len(br) != len(ar) || len(br) > 0 && !reflect.DeepEqual(br, ar) {
		return true
	}
	return managedFieldsChanged(before.GetManagedFields(), after.GetManagedFields())
}

// managedFieldsChanged compares the entries other than the status
// subresource's, in any order, without their timestamps.
func managedFieldsChanged(before, after []metav1.ManagedFieldsEntry) bool {
	a, b := nonStatus(before), nonStatus(after)
	if len(a) != len(b) {
		return true
	}
	return !slices.EqualFunc(a, b, func(x, y *metav1.ManagedFieldsEntry) bool { return compareEntries(x, y) == 0 })
}

// nonStatus is the entries other than the status subresource's, sorted.
func nonStatus(entries []metav1.ManagedFieldsEntry) []*metav1.ManagedFieldsEntry {
	out := make([]*metav1.ManagedFieldsEntry, 0, len(entries))
	for i := range entries {
		if entries[i].Subresource != statusSubresource {
			out = append(out, &entries[i])
		}
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// compareEntries orders managedFields entries by everything but their time.
func compareEntries(x, y *metav1.ManagedFieldsEntry) int {
	return cmp.Or(
		cmp.Compare(x.Manager, y.Manager),
		cmp.Compare(x.Operation, y.Operation),
		cmp.Compare(x.Subresource, y.Subresource),
		cmp.Compare(x.APIVersion, y.APIVersion),
		cmp.Compare(x.FieldsType, y.FieldsType),
		bytes.Compare(fieldsRaw(x.FieldsV1), fieldsRaw(y.FieldsV1)),
	)
}

func fieldsRaw(f *metav1.FieldsV1) []byte {
	if f == nil {
		return nil
	}
	return f.Raw
}
