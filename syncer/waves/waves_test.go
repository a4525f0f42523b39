package waves

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

func item(phase string, wave int, group, kind, ns, name string) *Item {
	return &Item{Phase: phase, Wave: wave, Group: group, Kind: kind, Namespace: ns, Name: name}
}

func names(items []*Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Phase+"/"+itoa(it.Wave)+"/"+it.Kind+"/"+it.Name)
	}
	return out
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	return string(rune('0' + i))
}

// Argo CD's order (gitops-engine sync_tasks_test TestSortSyncTask, as data):
// phase first (PreSync, Sync, PostSync, SyncFail), then wave, then kind
// order (unknown kinds last), then name.
func TestSortOrdersAsArgoCD(t *testing.T) {
	const sync, pre, post, fail = v1alpha1.SyncPhaseSync, v1alpha1.SyncPhasePreSync, v1alpha1.SyncPhasePostSync, v1alpha1.SyncPhaseSyncFail
	items := []*Item{
		item(sync, 0, "", "Pod", "", ""),
		item(sync, 0, "", "Service", "", ""),
		item(sync, 0, "", "PersistentVolume", "", ""),
		item(fail, 0, "", "", "", ""),
		item(sync, 1, "", "", "", ""),
		item(sync, 0, "", "", "", "b"),
		item(sync, 0, "", "", "", "a"),
		item(sync, -1, "", "", "", ""),
		item(sync, 0, "", "", "", ""),
		item(pre, 0, "", "", "", ""),
		item(post, 0, "", "", "", ""),
		item(sync, 0, "", "ConfigMap", "", ""),
		item(sync, 0, "", "Namespace", "", ""),
	}
	Sort(items)
	want := []string{
		"PreSync/0//",
		"Sync/-1//",
		"Sync/0/Namespace/", "Sync/0/ConfigMap/", "Sync/0/PersistentVolume/", "Sync/0/Service/", "Sync/0/Pod/",
		"Sync/0//", "Sync/0//a", "Sync/0//b",
		"Sync/1//",
		"PostSync/0//",
		"SyncFail/0//",
	}
	if diff := cmp.Diff(want, names(items)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// A Namespace sorts before a custom resource of an unknown kind
// (TestSyncNamespaceAgainstCRD).
func TestSortNamespaceBeforeUnknownKind(t *testing.T) {
	items := []*Item{item("Sync", 0, "argoproj.io", "Workflow", "", ""), item("Sync", 0, "", "Namespace", "", "")}
	Sort(items)
	if items[0].Kind != "Namespace" {
		t.Errorf("order = %v, want the Namespace first", names(items))
	}
}

// A Namespace whose objects run earlier moves to the first of them and takes
// its phase and wave (TestSyncTasksSort_NamespaceAndObjectInNamespace).
func TestSortPullsNamespacesToTheirFirstObject(t *testing.T) {
	hook1 := item("PreSync", 0, "batch", "Job", "ns1", "job1")
	hook2 := item("PreSync", 0, "batch", "Job", "ns2", "job2")
	ns1 := item("Sync", 1, "", "Namespace", "", "ns1")
	ns2 := item("Sync", 2, "", "Namespace", "", "ns2")
	items := []*Item{hook1, hook2, ns1, ns2}
	Sort(items)
	got := []*Item{ns1, hook1, ns2, hook2}
	for i := range got {
		if items[i] != got[i] {
			t.Fatalf("order = %v, want ns1, job1, ns2, job2", names(items))
		}
	}
	for _, ns := range []*Item{ns1, ns2} {
		if ns.Phase != "PreSync" || ns.Wave != 0 {
			t.Errorf("namespace %s placed in %s wave %d, want PreSync wave 0", ns.Name, ns.Phase, ns.Wave)
		}
	}
}

// A CustomResourceDefinition moves before the first custom resource of its
// kind, with its phase (TestSyncTasksSort_CRDAndCR).
func TestSortPullsCRDsToTheirFirstResource(t *testing.T) {
	cr := item("PreSync", 0, "argoproj.io", "Workflow", "", "w")
	crd := item("Sync", 0, "apiextensions.k8s.io", "CustomResourceDefinition", "", "workflows.argoproj.io")
	crd.CRDGroupKind = "argoproj.io/Workflow"
	items := []*Item{cr, crd}
	Sort(items)
	if items[0] != crd || crd.Phase != "PreSync" {
		t.Errorf("order = %v (crd phase %s), want the CRD first, in PreSync", names(items), crd.Phase)
	}
}

func obj(ann map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("batch/v1")
	u.SetKind("Job")
	u.SetName("j")
	u.SetAnnotations(ann)
	return u
}

// Place reads Argo CD's and Helm's annotations as Argo CD does (gitops-engine
// pkg/sync/hook and hook/helm tests, as data).
func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		phases   []string
		hook     bool
		wave     int
		policies []string
		err      string
	}{
		{name: "plain object", phases: []string{"Sync"}},
		{name: "argo wave", ann: map[string]string{AnnotationSyncWave: "3"}, phases: []string{"Sync"}, wave: 3},
		{name: "deputy wave wins", ann: map[string]string{AnnotationSyncWave: "3", AnnotationDeputySyncWave: "-2"}, phases: []string{"Sync"}, wave: -2},
		{name: "bad wave", ann: map[string]string{AnnotationSyncWave: "one"}, err: "not an integer"},
		{name: "PreSync hook", ann: map[string]string{AnnotationHook: "PreSync"}, phases: []string{"PreSync"}, hook: true, policies: []string{BeforeHookCreation}},
		{name: "two types", ann: map[string]string{AnnotationHook: "PreSync, PostSync"}, phases: []string{"PreSync", "PostSync"}, hook: true, policies: []string{BeforeHookCreation}},
		{name: "Skip alone", ann: map[string]string{AnnotationHook: "Skip"}},
		{name: "Skip with another type", ann: map[string]string{AnnotationHook: "Skip,Sync"}, phases: []string{"Sync"}, hook: true, policies: []string{BeforeHookCreation}},
		{name: "deletion hook: not run by a sync", ann: map[string]string{AnnotationHook: "PostDelete"}, hook: true, policies: []string{BeforeHookCreation}},
		{name: "unknown type", ann: map[string]string{AnnotationHook: "Presync"}, err: "unknown hook type"},
		{name: "policies", ann: map[string]string{AnnotationHook: "Sync", AnnotationHookDeletePolicy: "HookSucceeded,HookFailed"}, phases: []string{"Sync"}, hook: true, policies: []string{HookSucceeded, HookFailed}},
		{name: "unknown policy", ann: map[string]string{AnnotationHook: "Sync", AnnotationHookDeletePolicy: "Always"}, err: "unknown delete policy"},
		{name: "helm pre-install", ann: map[string]string{AnnotationHelmHook: "pre-install,pre-upgrade", AnnotationHelmWeight: "-5"}, phases: []string{"PreSync"}, hook: true, wave: -5, policies: []string{BeforeHookCreation}},
		{name: "helm post and delete policy", ann: map[string]string{AnnotationHelmHook: "post-install", AnnotationHelmDelete: "hook-succeeded"}, phases: []string{"PostSync"}, hook: true, policies: []string{HookSucceeded}},
		{name: "helm test hook is not run", ann: map[string]string{AnnotationHelmHook: "test"}, hook: true, policies: []string{BeforeHookCreation}},
		{name: "helm crd-install is no hook", ann: map[string]string{AnnotationHelmHook: "crd-install"}, phases: []string{"Sync"}},
		{name: "argo hook wins over helm", ann: map[string]string{AnnotationHook: "Sync", AnnotationHelmHook: "pre-install"}, phases: []string{"Sync"}, hook: true, policies: []string{BeforeHookCreation}},
		{name: "helm weight ignored without a helm hook", ann: map[string]string{AnnotationHelmWeight: "4"}, phases: []string{"Sync"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Place(obj(tc.ann))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Place error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Placement{Phases: tc.phases, Hook: tc.hook, Wave: tc.wave, DeletePolicies: tc.policies}
			if diff := cmp.Diff(want, p); diff != "" {
				t.Errorf("Place (-want +got):\n%s", diff)
			}
			if got := IsHook(tc.ann); got != tc.hook {
				t.Errorf("IsHook = %v, want %v", got, tc.hook)
			}
		})
	}
}
