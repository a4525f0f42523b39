package syncer

import (
	"context"
	"fmt"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/health"
	"deputy.dev/deputy/syncer/permissions"
)

// listPageSize is the page size of the preflight's lists (metadata only).
const listPageSize = 500

// scopeKey is a (resource, namespace) to list.
type scopeKey struct{ group, resource, namespace string }

// listTarget is one (resource, namespace) the preflight lists: where
// rendered objects live (to learn which exist and which are unchanged) and,
// with prune, where tracked objects may be.
type listTarget struct {
	gvk       schema.GroupVersionKind
	gvr       schema.GroupVersionResource
	namespace string
	// prune: prune needs this list (its permission is required).
	prune bool
	// rendered: rendered objects live here.
	rendered bool
}

func (t listTarget) key() scopeKey { return scopeKey{t.gvr.Group, t.gvr.Resource, t.namespace} }

// listTargets merges the scopes of the rendered objects (kinds the cluster
// serves) with the prune scopes, in a stable order.
func listTargets(p *plan) []listTarget {
	index := map[scopeKey]int{}
	var out []listTarget
	add := func(t listTarget) {
		if i, ok := index[t.key()]; ok {
			out[i].prune = out[i].prune || t.prune
			out[i].rendered = out[i].rendered || t.rendered
			return
		}
		index[t.key()] = len(out)
		out = append(out, t)
	}
	for _, o := range p.objects {
		if !o.crdDefined {
			add(listTarget{gvk: o.gvk, gvr: o.gvr, namespace: o.namespace(), rendered: true})
		}
	}
	for _, s := range p.pruneScopes {
		add(listTarget{gvk: s.gvk, gvr: s.gvr, namespace: s.namespace, prune: true})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].key(), out[j].key()
		if a.group != b.group {
			return a.group < b.group
		}
		if a.resource != b.resource {
			return a.resource < b.resource
		}
		return a.namespace < b.namespace
	})
	return out
}

// liveObject is what a list (or a metadata GET) says about one existing
// object.
type liveObject struct {
	uid    types.UID
	digest string
	// tracking is the object's TrackingAnnotation value: the Application
	// that manages it ("" for none).
	tracking string
	// soleApplier: every managedFields entry is deputy's server-side apply
	// of the object itself, or a write of its status subresource: nobody
	// else has written what deputy applied since.
	soleApplier bool
	deleting    bool
	// health is the object's health when the list returned whole objects
	// (kinds with a status), and listRV the list's resourceVersion.
	health *v1alpha1.HealthStatus
	listRV string
	// obj is the whole object (Diff only).
	obj *unstructured.Unstructured
	// owned is the FieldsV1 of deputy's own server-side apply entry.
	owned []byte
}

// trackedByOther returns the other Application that tracks the object
// ("NAMESPACE/NAME", its TrackingAnnotation value), or "" when the object is
// untracked (deputy adopts it) or tracked by tracking itself.
func (l *liveObject) trackedByOther(tracking string) string {
	if l == nil || l.tracking == "" || l.tracking == tracking {
		return ""
	}
	return l.tracking
}

// unchangedFrom reports whether applying the body with this digest again
// would change nothing: deputy applied exactly that body last, and no other
// writer (a person, a controller, a status update) has touched the object
// since: every write by anyone else adds or changes a managedFields entry
// of another manager. A nil live object (it does not exist) is changed.
func (l *liveObject) unchangedFrom(digest string) bool {
	return l != nil && !l.deleting && l.soleApplier && l.digest != "" && l.digest == digest
}

// notSole marks l written by someone else since deputy applied it.
func (l *liveObject) notSole() *liveObject {
	l.soleApplier = false
	return l
}

func liveFrom(m *metav1.PartialObjectMetadata) *liveObject {
	l := &liveObject{uid: m.UID, digest: m.Annotations[appliedDigestAnnotation], tracking: m.Annotations[TrackingAnnotation],
		deleting: m.DeletionTimestamp != nil}
	for _, f := range m.ManagedFields {
		switch {
		case f.Subresource == "status":
			// A controller writing status (a Deployment's rollout) cannot
			// change what deputy applied: the status subresource ignores
			// every other field.
		case f.Manager == FieldManager && f.Operation == metav1.ManagedFieldsOperationApply && f.Subresource == "":
			l.soleApplier = true
			if f.FieldsV1 != nil {
				l.owned = f.FieldsV1.Raw
			}
		default:
			return l.notSole()
		}
	}
	return l
}

// observed is what the preflight's lists found.
type observed struct {
	// listed are the scopes listed completely (a resource the cluster does
	// not serve counts, empty).
	listed map[scopeKey]bool
	// live are the existing objects among the rendered ones.
	live map[objKey]*liveObject
	// candidates are the objects prune would delete.
	candidates []*pruneCandidate
}

// observe lists every target (metadata only, paged) as the operation's
// identity. A prune target that cannot be listed is a problem; any other is
// simply not known.
func (op *operation) observe(ctx context.Context, cl *clients, targets []listTarget, rendered map[objKey]bool) (*observed, []string) {
	out := &observed{listed: map[scopeKey]bool{}, live: map[objKey]*liveObject{}}
	var (
		mu       sync.Mutex
		problems []string
		seen     = map[types.UID]bool{}
	)
	parallel(len(targets), op.e.opts.Parallelism, func(i int) {
		t := targets[i]
		items, healths, err := op.list(ctx, cl, t)
		if apierrors.IsNotFound(err) {
			err = nil // the resource is not served: nothing exists
		}
		if err != nil {
			if t.prune || ((op.diffing || op.comparing) && t.rendered) {
				where := "cluster-wide"
				if t.namespace != "" {
					where = "in namespace " + t.namespace
				}
				mu.Lock()
				what := "prune"
				if !t.prune {
					what = "diff"
				}
				problems = append(problems, fmt.Sprintf("%s: cannot list %s %s: %v", what, permissions.ResourceString(t.gvr.Group, t.gvr.Resource), where, err))
				mu.Unlock()
			}
			return
		}
		var cands []*pruneCandidate
		if t.prune {
			cands = selectPruneCandidates(pruneScope{gvk: t.gvk, gvr: t.gvr, namespace: t.namespace}, items, op.tracking, rendered, op.deleting)
		}
		mu.Lock()
		defer mu.Unlock()
		out.listed[t.key()] = true
		for j := range items {
			k := objKey{group: t.gvk.Group, kind: t.gvk.Kind, namespace: items[j].Namespace, name: items[j].Name}
			if rendered[k] {
				out.live[k] = liveFrom(&items[j])
				if healths != nil {
					out.live[k].health, out.live[k].listRV, out.live[k].obj = healths[j].health, healths[j].rv, healths[j].obj
				}
			}
		}
		for _, c := range cands {
			if !seen[c.uid] {
				seen[c.uid] = true
				out.candidates = append(out.candidates, c)
			}
		}
	}, func(i int, r any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf("internal error while listing: %v", r))
	})
	sort.Slice(out.candidates, func(i, j int) bool { return keyLess(out.candidates[i].key(), out.candidates[j].key()) })
	sort.Strings(problems)
	return out, problems
}

// listedHealth is the health of one listed object and the list's
// resourceVersion.
type listedHealth struct {
	health *v1alpha1.HealthStatus
	rv     string
	// obj is the whole object, kept for Diff.
	obj *unstructured.Unstructured
}

// list lists one target, paged, as the identity: metadata only, or whole
// objects where rendered objects of a kind with a status live (a sync then
// knows their health without reading them again; healths is nil
// otherwise).
func (op *operation) list(ctx context.Context, cl *clients, t listTarget) (items []metav1.PartialObjectMetadata, healths []listedHealth, err error) {
	if op.comparing {
		items, err := op.listLive(ctx, cl, t)
		return items, nil, err
	}
	opts := metav1.ListOptions{Limit: listPageSize}
	whole := t.rendered && (op.diffing || !op.deleting && !op.req.Sync.DryRun && !health.Statusless(t.gvk.Group, t.gvk.Kind))
	for {
		if !whole {
			list, err := cl.meta.Resource(t.gvr).Namespace(t.namespace).List(ctx, opts)
			if err != nil {
				return nil, nil, err
			}
			items = append(items, list.Items...)
			opts.Continue = list.Continue
		} else {
			list, err := cl.dyn.Resource(t.gvr).Namespace(t.namespace).List(ctx, opts)
			if err != nil {
				return nil, nil, err
			}
			for i := range list.Items {
				u := &list.Items[i]
				items = append(items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
					Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), Annotations: u.GetAnnotations(),
					ManagedFields: u.GetManagedFields(), DeletionTimestamp: u.GetDeletionTimestamp(), OwnerReferences: u.GetOwnerReferences(),
				}})
				h := health.Assess(u)
				lh := listedHealth{health: &h, rv: list.GetResourceVersion()}
				if op.diffing {
					lh.obj = u
				}
				healths = append(healths, lh)
			}
			opts.Continue = list.GetContinue()
		}
		if opts.Continue == "" {
			return items, healths, nil
		}
	}
}
