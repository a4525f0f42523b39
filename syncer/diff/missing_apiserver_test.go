//go:build envtest

// This test replays every case of testdata/*.yaml against a real
// kube-apiserver and etcd (envtest): it server-side applies the body as
// field manager "deputy" (forced), makes the other writers' writes, reads
// the object's metadata only (managedFields) and checks Missing on deputy's
// Apply entry. With UPDATE_GOLDEN=1 it records that entry's FieldsV1 in
// testdata/<file>.<case>.owned.json, which the unit tests read:
//
//	KUBEBUILDER_ASSETS=$PWD/bin go test -tags envtest -run APIServer ./syncer/diff/
//	KUBEBUILDER_ASSETS=$PWD/bin UPDATE_GOLDEN=1 go test -tags envtest -run APIServer ./syncer/diff/

package diff_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/syncer/diff"
)

// resources are the resources of the kinds testdata uses.
var resources = map[string]schema.GroupVersionResource{
	"Deployment": {Group: "apps", Version: "v1", Resource: "deployments"},
	"Service":    {Version: "v1", Resource: "services"},
	"ConfigMap":  {Version: "v1", Resource: "configmaps"},
	"Secret":     {Version: "v1", Resource: "secrets"},
}

var patchTypes = map[string]types.PatchType{
	"strategic": types.StrategicMergePatchType,
	"merge":     types.MergePatchType,
	"json":      types.JSONPatchType,
	"apply":     types.ApplyPatchType,
}

func TestMissingAPIServer(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (make test-binaries puts them in bin/)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kc := kubernetes.NewForConfigOrDie(cfg)
	dc := dynamic.NewForConfigOrDie(cfg)
	mc := metadata.NewForConfigOrDie(cfg)
	ctx := context.Background()
	update := os.Getenv("UPDATE_GOLDEN") != ""

	for file, cf := range loadCases(t) {
		for _, c := range cf.Cases {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				ns := "diff-" + file + "-" + c.Name
				if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				body := &unstructured.Unstructured{Object: cf.Body}
				body = body.DeepCopy()
				gvr, ok := resources[body.GetKind()]
				if !ok {
					t.Fatalf("no resource for kind %s", body.GetKind())
				}
				ri := dc.Resource(gvr).Namespace(ns)
				if _, err := ri.Apply(ctx, body.GetName(), body, metav1.ApplyOptions{FieldManager: "deputy", Force: true}); err != nil {
					t.Fatalf("deputy's apply: %v", err)
				}
				for _, w := range c.Writes {
					force := w.Type == "apply"
					opts := metav1.PatchOptions{FieldManager: w.Manager}
					if force {
						opts.Force = &force
					}
					var sub []string
					if w.Subresource != "" {
						sub = []string{w.Subresource}
					}
					if _, err := ri.Patch(ctx, body.GetName(), patchTypes[w.Type], w.Patch, opts, sub...); err != nil {
						t.Fatalf("%s's %s patch: %v", w.Manager, w.Type, err)
					}
				}
				live, err := mc.Resource(gvr).Namespace(ns).Get(ctx, body.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				owned := deputyEntry(t, live.ManagedFields)
				got, err := diff.Missing(owned, cf.Body, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want(c.Missing)) {
					t.Errorf("Missing = %q, want %q\nmanagers: %s\ndeputy's set: %s", got, c.Missing, managers(live.ManagedFields), owned)
				}
				if update {
					if err := os.WriteFile(ownedFile(file, c.Name), indentJSON(t, owned), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// deputyEntry is the FieldsV1 of deputy's Apply entry (not of a
// subresource).
func deputyEntry(t *testing.T, entries []metav1.ManagedFieldsEntry) []byte {
	t.Helper()
	for _, e := range entries {
		if e.Manager == "deputy" && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" && e.FieldsV1 != nil {
			return e.FieldsV1.Raw
		}
	}
	t.Fatalf("no Apply entry of deputy in %s", managers(entries))
	return nil
}

// managers lists the entries for a failure message.
func managers(entries []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, e := range entries {
		raw := ""
		if e.FieldsV1 != nil {
			raw = string(e.FieldsV1.Raw)
		}
		b, _ := json.Marshal(map[string]string{"manager": e.Manager, "operation": string(e.Operation), "subresource": e.Subresource, "fields": raw})
		out = append(out, string(b))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
