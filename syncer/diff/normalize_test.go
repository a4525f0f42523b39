package diff_test

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/syncer/diff"
)

// u is YAML as an unstructured object.
func u(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	return &unstructured.Unstructured{Object: obj(t, y)}
}

func TestNormalize(t *testing.T) {
	live := u(t, `
apiVersion: v1
kind: ConfigMap
metadata:
  name: c
  namespace: ns
  uid: 1234
  resourceVersion: "7"
  generation: 3
  creationTimestamp: "2024-01-01T00:00:00Z"
  deletionTimestamp: "2024-01-02T00:00:00Z"
  deletionGracePeriodSeconds: 30
  selfLink: /api/v1/namespaces/ns/configmaps/c
  managedFields: [{manager: deputy}]
  labels: {}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"data":{"a":"b"}}'
    deputy.dev/applied-digest: abc
    keep: me
  finalizers: [x]
  ownerReferences: [{name: o}]
data: {a: b}
status: {phase: x}
`)
	orig := live.DeepCopy()
	got := diff.Normalize(live, "deputy.dev/applied-digest")
	want := u(t, `
apiVersion: v1
kind: ConfigMap
metadata:
  name: c
  namespace: ns
  annotations: {keep: me}
  finalizers: [x]
  ownerReferences: [{name: o}]
data: {a: b}
`)
	if !reflect.DeepEqual(got.Object, want.Object) {
		t.Errorf("Normalize =\n%v\nwant\n%v", got.Object, want.Object)
	}
	if !reflect.DeepEqual(live.Object, orig.Object) {
		t.Error("Normalize modified its input")
	}

	// Annotations left empty are removed; so is an empty labels map.
	got = diff.Normalize(u(t, "metadata: {name: c, labels: {}, annotations: {d: x}}"), "d")
	if want := u(t, "metadata: {name: c}"); !reflect.DeepEqual(got.Object, want.Object) {
		t.Errorf("Normalize = %v, want %v", got.Object, want.Object)
	}
	// Labels are kept when not empty; no metadata at all is fine.
	if got := diff.Normalize(u(t, "metadata: {labels: {a: b}}")); !reflect.DeepEqual(got.Object, obj(t, "metadata: {labels: {a: b}}")) {
		t.Errorf("Normalize = %v", got.Object)
	}
	if got := diff.Normalize(u(t, "kind: X\nstatus: {}")); !reflect.DeepEqual(got.Object, obj(t, "kind: X")) {
		t.Errorf("Normalize = %v", got.Object)
	}
	if diff.Normalize(nil) != nil {
		t.Error("Normalize(nil) != nil")
	}
}
