package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestResourcesFinalizerOf(t *testing.T) {
	for _, tc := range []struct {
		finalizers  []string
		want        string
		index       int
		propagation metav1.DeletionPropagation
	}{
		{nil, "", -1, ""},
		{[]string{"example.com/other"}, "", -1, ""},
		{[]string{"example.com/other", ResourcesFinalizer}, ResourcesFinalizer, 1, metav1.DeletePropagationForeground},
		{[]string{BackgroundResourcesFinalizer}, BackgroundResourcesFinalizer, 0, metav1.DeletePropagationBackground},
		{[]string{ArgoCDResourcesFinalizer}, ArgoCDResourcesFinalizer, 0, metav1.DeletePropagationForeground},
		{[]string{ArgoCDForegroundResourcesFinalizer}, ArgoCDForegroundResourcesFinalizer, 0, metav1.DeletePropagationForeground},
		{[]string{ArgoCDBackgroundResourcesFinalizer, ResourcesFinalizer}, ArgoCDBackgroundResourcesFinalizer, 0, metav1.DeletePropagationBackground},
	} {
		app := &Application{ObjectMeta: metav1.ObjectMeta{Finalizers: tc.finalizers}}
		f, i, p, ok := ResourcesFinalizerOf(app)
		if f != tc.want || i != tc.index || p != tc.propagation || ok != (tc.want != "") {
			t.Errorf("%v: got %q %d %q %v", tc.finalizers, f, i, p, ok)
		}
	}
}
