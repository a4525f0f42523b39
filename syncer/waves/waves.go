package waves

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Annotations read here: Argo CD's, Helm's and deputy's own wave.
const (
	AnnotationHook             = "argocd.argoproj.io/hook"
	AnnotationHookDeletePolicy = "argocd.argoproj.io/hook-delete-policy"
	AnnotationSyncWave         = "argocd.argoproj.io/sync-wave"
	// AnnotationDeputySyncWave is deputy's own spelling of the wave; it
	// wins over Argo CD's when both are set.
	AnnotationDeputySyncWave = "deputy.dev/sync-wave"
	AnnotationHelmHook       = "helm.sh/hook"
	AnnotationHelmWeight     = "helm.sh/hook-weight"
	AnnotationHelmDelete     = "helm.sh/hook-delete-policy"
)

// Hook delete policies (Argo CD's HookDeletePolicy).
const (
	HookSucceeded      = "HookSucceeded"
	HookFailed         = "HookFailed"
	BeforeHookCreation = "BeforeHookCreation"
)

// Placement is where one object runs in a sync.
type Placement struct {
	// Phases are the sync phases it runs in: [Sync] for an ordinary
	// object; a hook's types (a hook may run in several); none for a hook
	// a sync does not run (Skip, Helm test hooks, Argo CD's PreDelete and
	// PostDelete).
	Phases []string
	// Hook: the object is a hook (created each sync, waited for until it
	// completes, never pruned).
	Hook bool
	// Wave orders objects within a phase.
	Wave int
	// DeletePolicies are a hook's delete policies (BeforeHookCreation when
	// none is set, Argo CD's default).
	DeletePolicies []string
}

// HasPolicy reports whether the placement's hook has delete policy p.
func (p Placement) HasPolicy(policy string) bool {
	for _, d := range p.DeletePolicies {
		if d == policy {
			return true
		}
	}
	return false
}

// helmHookPhases maps Helm's hook types to Argo CD's phases (Argo CD's
// mapping: Helm hooks run before or after, never during, a sync). Other
// Helm types (test, pre-delete, pre-rollback, ...) are hooks a sync does
// not run.
var helmHookPhases = map[string]string{
	"pre-install": v1alpha1.SyncPhasePreSync, "pre-upgrade": v1alpha1.SyncPhasePreSync,
	"post-install": v1alpha1.SyncPhasePostSync, "post-upgrade": v1alpha1.SyncPhasePostSync,
}

var helmDeletePolicies = map[string]string{
	"before-hook-creation": BeforeHookCreation, "hook-succeeded": HookSucceeded, "hook-failed": HookFailed,
}

// csv splits an annotation's comma-separated values, trimmed, empty ones
// dropped (Argo CD's GetAnnotationCSVs).
func csv(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Place reads obj's annotations. Argo CD's hook annotation wins over
// Helm's; a hook annotation of Skip alone means the object is not applied
// at all (Phases empty, Hook false).
//
// Errors (naming the annotation and the fix): an unknown Argo CD hook type
// or delete policy, a wave that is not an integer. Argo CD ignores these
// silently; deputy refuses them, since a typo would otherwise change what a
// sync applies and when.
func Place(obj *unstructured.Unstructured) (Placement, error) {
	ann := obj.GetAnnotations()
	var p Placement
	if v, ok := ann[AnnotationHook]; ok {
		types := csv(v)
		skip := false
		for _, t := range types {
			switch t {
			case v1alpha1.SyncPhasePreSync, v1alpha1.SyncPhaseSync, v1alpha1.SyncPhasePostSync, v1alpha1.SyncPhaseSyncFail:
				p.Phases = append(p.Phases, t)
			case "Skip":
				skip = true
			case "PreDelete", "PostDelete":
				// Argo CD runs them when an Application is deleted; a
				// sync does not.
			default:
				return p, fmt.Errorf("annotation %s: unknown hook type %q: use PreSync, Sync, PostSync, SyncFail or Skip", AnnotationHook, t)
			}
		}
		if skip && len(types) == 1 {
			return Placement{}, nil
		}
		p.Hook = true
	} else if v, ok := ann[AnnotationHelmHook]; ok && v != "crd-install" {
		// Helm marks CRDs of Helm 2 charts with crd-install: no hook.
		p.Hook = true
		for _, t := range csv(v) {
			if ph, ok := helmHookPhases[t]; ok && !contains(p.Phases, ph) {
				p.Phases = append(p.Phases, ph)
			}
		}
	} else {
		p.Phases = []string{v1alpha1.SyncPhaseSync}
	}
	var err error
	if p.Wave, err = wave(ann); err != nil {
		return p, err
	}
	if p.Hook {
		if p.DeletePolicies, err = deletePolicies(ann); err != nil {
			return p, err
		}
	}
	return p, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// wave is deputy's wave annotation, else Argo CD's, else a Helm hook's
// weight, else 0.
func wave(ann map[string]string) (int, error) {
	for _, k := range []string{AnnotationDeputySyncWave, AnnotationSyncWave} {
		if v, ok := ann[k]; ok {
			w, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("annotation %s: %q is not an integer: write a whole number such as \"-1\" or \"2\"", k, v)
			}
			return w, nil
		}
	}
	if _, ok := ann[AnnotationHelmHook]; ok {
		if v, ok := ann[AnnotationHelmWeight]; ok {
			w, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("annotation %s: %q is not an integer: write a whole number such as \"-1\" or \"2\"", AnnotationHelmWeight, v)
			}
			return w, nil
		}
	}
	return 0, nil
}

// WaveOf is the wave of an object's annotations, 0 when it has none or one
// that is not an integer (prune uses it on live objects, which it must
// not refuse).
func WaveOf(ann map[string]string) int {
	w, _ := wave(ann)
	return w
}

// IsHook reports whether annotations mark a hook a sync creates (Argo CD's
// hook annotation other than Skip alone, or Helm's other than
// crd-install): prune never deletes such an object.
func IsHook(ann map[string]string) bool {
	if v, ok := ann[AnnotationHook]; ok {
		t := csv(v)
		return !(len(t) == 1 && t[0] == "Skip")
	}
	v, ok := ann[AnnotationHelmHook]
	return ok && v != "crd-install"
}

// deletePolicies are Argo CD's and Helm's delete policies together, or
// BeforeHookCreation when neither sets one.
func deletePolicies(ann map[string]string) ([]string, error) {
	var out []string
	for _, p := range csv(ann[AnnotationHookDeletePolicy]) {
		if p != HookSucceeded && p != HookFailed && p != BeforeHookCreation {
			return nil, fmt.Errorf("annotation %s: unknown delete policy %q: use HookSucceeded, HookFailed or BeforeHookCreation", AnnotationHookDeletePolicy, p)
		}
		if !contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range csv(ann[AnnotationHelmDelete]) {
		if d, ok := helmDeletePolicies[p]; ok && !contains(out, d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		out = []string{BeforeHookCreation}
	}
	return out, nil
}

// PhaseOrder ranks the phases in the order they run (SyncFail last: it
// runs only after a failure).
func PhaseOrder(phase string) int {
	switch phase {
	case v1alpha1.SyncPhasePreSync:
		return -1
	case v1alpha1.SyncPhaseSync:
		return 0
	case v1alpha1.SyncPhasePostSync:
		return 1
	}
	return 2
}

// kindOrder is Argo CD's (and Helm's) install order of kinds within a wave:
// what others refer to goes first (a RoleBinding after its Role, whose
// escalation check needs it). Kinds not listed go last.
var kindOrder = func() map[string]int {
	kinds := []string{
		"Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
		"ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
		"PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
		"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod",
		"ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job",
		"CronJob", "IngressClass", "Ingress", "APIService",
	}
	m := make(map[string]int, len(kinds))
	for i, k := range kinds {
		m[k] = i
	}
	return m
}()

// KindRank is kind's place in Argo CD's kind order (unknown kinds last).
func KindRank(kind string) int {
	if r, ok := kindOrder[kind]; ok {
		return r
	}
	return len(kindOrder)
}

// Item is one task of a sync to order: an object in one phase.
type Item struct {
	Phase                        string
	Wave                         int
	Group, Kind, Namespace, Name string
	// CRDGroupKind is "GROUP/KIND" for a CustomResourceDefinition (the kind
	// it defines), "" otherwise.
	CRDGroupKind string
	// Index is the caller's: Sort moves Items, never changes it.
	Index int
}

func (a *Item) less(b *Item) bool {
	if d := PhaseOrder(a.Phase) - PhaseOrder(b.Phase); d != 0 {
		return d < 0
	}
	if a.Wave != b.Wave {
		return a.Wave < b.Wave
	}
	if d := KindRank(a.Kind) - KindRank(b.Kind); d != 0 {
		return d < 0
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	// Argo CD stops at the name; deputy breaks ties for a stable order.
	if a.Group != b.Group {
		return a.Group < b.Group
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	return a.Namespace < b.Namespace
}

// Sort orders items as Argo CD orders sync tasks: phase, wave, kind order,
// name; then a Namespace that an earlier item lives in, and a
// CustomResourceDefinition whose kind an earlier item is, move to just
// before the first such item, taking its phase and wave (gitops-engine's
// syncTasks.Sort with adjustDeps).
func Sort(items []*Item) {
	sort.SliceStable(items, func(i, j int) bool { return items[i].less(items[j]) })
	adjust(items, func(it *Item) (string, bool) {
		return it.Name, it.Group == "" && it.Kind == "Namespace"
	}, func(it *Item) (string, bool) {
		return it.Namespace, it.Namespace != ""
	})
	adjust(items, func(it *Item) (string, bool) {
		return it.CRDGroupKind, it.CRDGroupKind != ""
	}, func(it *Item) (string, bool) {
		return it.Group + "/" + it.Kind, true
	})
}

// adjust moves each dependency (isDep) found after an item that refers to
// it (refersTo) to that item's place, with its phase and wave.
func adjust(items []*Item, isDep, refersTo func(*Item) (string, bool)) {
	first := map[string]int{}
	for i := 0; i < len(items); i++ {
		it := items[i]
		if key, ok := isDep(it); ok {
			idx, seen := first[key]
			if !seen {
				continue
			}
			it.Phase, it.Wave = items[idx].Phase, items[idx].Wave
			copy(items[idx+1:i+1], items[idx:i])
			items[idx] = it
			for k, f := range first {
				if f >= idx {
					first[k] = f + 1
				}
			}
			continue
		}
		if key, ok := refersTo(it); ok {
			if _, seen := first[key]; !seen {
				first[key] = i
			}
		}
	}
}
