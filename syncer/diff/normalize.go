package diff

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// LastAppliedAnnotation is the annotation client-side kubectl apply keeps
// the last applied configuration in (corev1.LastAppliedConfigAnnotation).
// Normalize drops it: it repeats the object (and, on a Secret, its values).
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// serverMetadata are the metadata fields only the apiserver writes: a
// manifest cannot set them, so a diff never compares them.
var serverMetadata = []string{
	"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink",
	"deletionTimestamp", "deletionGracePeriodSeconds",
}

// Normalize returns a deep copy of u without what the apiserver owns, the
// noise kubectl diff and Argo CD's diff leave out of a comparison: the
// metadata fields managedFields, resourceVersion, uid, generation,
// creationTimestamp and selfLink, the whole status, the annotation
// kubectl.kubernetes.io/last-applied-configuration and the annotations
// named in drop (deputy passes the annotation it records the applied
// digest in). An annotations or labels map left empty is removed, so that
// an object without labels equals one with an empty labels map.
//
// deletionTimestamp and deletionGracePeriodSeconds are removed too: a
// manifest cannot set them and a sync does not undo a deletion, so a live
// object that is being deleted is reported by its health, not as a
// difference.
//
// Normalize(nil) is nil. u is not modified.
func Normalize(u *unstructured.Unstructured, drop ...string) *unstructured.Unstructured {
	if u == nil {
		return nil
	}
	out := u.DeepCopy()
	delete(out.Object, "status")
	md, ok := out.Object["metadata"].(map[string]any)
	if !ok {
		return out
	}
	for _, f := range serverMetadata {
		delete(md, f)
	}
	if ann, ok := md["annotations"].(map[string]any); ok {
		delete(ann, LastAppliedAnnotation)
		for _, a := range drop {
			delete(ann, a)
		}
	}
	for _, m := range []string{"annotations", "labels"} {
		if v, ok := md[m]; ok && isEmpty(v) {
			delete(md, m)
		}
	}
	return out
}

// isEmpty reports whether v is null or an empty map.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	}
	return false
}
