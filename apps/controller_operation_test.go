package apps

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Whether the operation field read back from the API is still the operation
// a record was made of: every spelling of the same operation is, whatever
// kube-apiserver kept of what the writer sent.
func TestSameOperation(t *testing.T) {
	recorded := recordedOperation{generation: 2, operation: v1alpha1.Operation{
		Sync: &v1alpha1.SyncOperation{}, InitiatedBy: v1alpha1.InitiatedBy{Username: "alice"}}}
	for _, tc := range []struct {
		name       string
		generation int64
		field      string
		want       bool
	}{
		{"at the recording generation any spelling is the same operation", 2, `{"sync":{"prune":false,"dryRun":false,"revision":""},"initiatedBy":{"username":"alice","automated":false}}`, true},
		{"at the recording generation even a field deputy does not know", 2, `{"sync":{"syncStrategy":{"apply":{}}},"initiatedBy":{"username":"alice"},"info":[]}`, true},
		{"after a spec change, explicit false is the same operation", 3, `{"sync":{"prune":false},"initiatedBy":{"username":"alice"}}`, true},
		{"after a spec change, explicit empty values are the same operation", 3, `{"sync":{"revision":"","dryRun":false},"initiatedBy":{"username":"alice","automated":false}}`, true},
		{"after a spec change, unknown fields do not make another operation", 3, `{"sync":{"prune":false,"syncOptions":["X"]},"initiatedBy":{"username":"alice"},"retry":{}}`, true},
		{"another initiator is another operation", 4, `{"sync":{},"initiatedBy":{"username":"bob"}}`, false},
		{"prune requested is another operation", 4, `{"sync":{"prune":true},"initiatedBy":{"username":"alice"}}`, false},
		{"an operation without sync is another operation", 4, `{"initiatedBy":{"username":"alice"}}`, false},
		{"a field that is not an object is another operation", 4, `"sync"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var field any
			if err := json.Unmarshal([]byte(tc.field), &field); err != nil {
				t.Fatal(err)
			}
			if got := sameOperation(tc.generation, field, recorded); got != tc.want {
				t.Errorf("sameOperation(generation %d, %s) = %v, want %v", tc.generation, tc.field, got, tc.want)
			}
		})
	}
}

// A sync of an Application being deleted is refused at once (422 through
// the API): its deletion never lets it run.
func TestStartRefusesAnApplicationBeingDeleted(t *testing.T) {
	c := &Controller{}
	now := metav1.Now()
	app := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "gone", DeletionTimestamp: &now}}
	_, err := c.Start(t.Context(), app, nil, v1alpha1.SyncOperation{}, v1alpha1.InitiatedBy{Username: "alice"})
	if !errors.Is(err, ErrInvalidSync) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("Start: %v", err)
	}
}
