package v1alpha1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fill sets every field reachable from v: strings, bools, pointers (allocated)
// and slices (two elements each), so that a deep copy that forgets a field or
// shares memory is caught. metav1 types are filled by hand: their copies are
// apimachinery's.
func fill(v reflect.Value, depth int) {
	switch v.Interface().(type) {
	case metav1.Time:
		v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))))
		return
	case metav1.ObjectMeta:
		v.Set(reflect.ValueOf(metav1.ObjectMeta{Name: "n", Namespace: "ns", Labels: map[string]string{"a": "b"}}))
		return
	case metav1.TypeMeta:
		v.Set(reflect.ValueOf(metav1.TypeMeta{APIVersion: "deputy.dev/v1alpha1", Kind: "Application"}))
		return
	case metav1.ListMeta:
		v.Set(reflect.ValueOf(metav1.ListMeta{ResourceVersion: "1"}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		if depth > 20 { // no recursive types here; a guard all the same
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), depth+1)
		}
	}
}

// shares reports the path of the first pointer or slice the two values share.
func shares(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return shares(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
		for i := range a.Len() {
			if p := shares(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return path
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if p := shares(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	}
	return ""
}

func TestApplicationDeepCopyCopiesEveryFieldAndSharesNothing(t *testing.T) {
	var list ApplicationList
	fill(reflect.ValueOf(&list).Elem(), 0)
	if list.Items[0].Status.OperationState.SyncResult.Resources[1].Name != "x" || !list.Items[0].Spec.SyncPolicy.Automated.SelfHeal {
		t.Fatalf("fill did not reach the leaves: %+v", list.Items[0])
	}
	for _, tc := range []struct {
		name     string
		in, copy any
	}{
		{"an Application", &list.Items[0], list.Items[0].DeepCopy()},
		{"an ApplicationList", &list, list.DeepCopy()},
		{"an OperationState", list.Items[0].Status.OperationState, list.Items[0].Status.OperationState.DeepCopy()},
		{"a runtime.Object copy of an Application", &list.Items[1], list.Items[1].DeepCopyObject()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !reflect.DeepEqual(tc.in, tc.copy) {
				t.Errorf("copy differs:\n%+v\n%+v", tc.in, tc.copy)
			}
			if p := shares(reflect.ValueOf(tc.in), reflect.ValueOf(tc.copy), ""); p != "" {
				t.Errorf("copy shares memory at %s", p)
			}
		})
	}
}

func TestApplicationDeepCopyOfNilIsNil(t *testing.T) {
	var a *Application
	if a.DeepCopy() != nil || a.DeepCopyObject() != nil {
		t.Error("a nil Application copies to non-nil")
	}
	var s *OperationState
	if s.DeepCopy() != nil {
		t.Error("a nil OperationState copies to non-nil")
	}
}
