package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"deputy.dev/deputy/policy/clustersource"
)

func TestClusterReadiness(t *testing.T) {
	src, err := clustersource.NewForClients(clustersource.Clients{
		Kube:    kubefake.NewClientset(),
		Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
	}, clustersource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check := clusterReady(src)
	if err := check(); err == nil || !strings.Contains(err.Error(), "not synced yet") {
		t.Errorf("before sync: %v, want not synced", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// The fake discovery knows no AppProject CRD: both groups count as
	// absent, which does not hold up readiness.
	deadline := time.Now().Add(30 * time.Second)
	for check() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", check())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
