package syncer

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"deputy.dev/deputy/syncer/livestate"
)

// A change is an Application's only when seen in a scope its last
// comparison read: an object elsewhere (another tenant's namespace, another
// identity's informer, another cluster) naming it by its tracking value
// does not make deputy compare it (attack 27).
func TestLiveChangedOnlyFromTheApplicationsOwnScopes(t *testing.T) {
	var got []string
	e := &Engine{opts: EngineOptions{OnLiveChange: func(ns, name string) { got = append(got, ns+"/"+name) }}}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	now := time.Unix(1_000_000, 0)
	e.watching.Set("apps/a", "https://one", "system:serviceaccount:a:deployer", gvrs([]listTarget{{gvr: cms, namespace: "a"}}), now)
	own := livestate.Scope{Server: "https://one", Identity: "system:serviceaccount:a:deployer", GVR: cms, Namespace: "a"}

	e.liveChanged("apps/a", own)
	if len(got) != 1 || got[0] != "apps/a" {
		t.Fatalf("a change in the Application's own scope: OnLiveChange %v", got)
	}
	for name, s := range map[string]livestate.Scope{
		"another namespace": {Server: own.Server, Identity: own.Identity, GVR: cms, Namespace: "b"},
		"another identity":  {Server: own.Server, Identity: "system:serviceaccount:b:deployer", GVR: cms, Namespace: "a"},
		"another cluster":   {Server: "https://two", Identity: own.Identity, GVR: cms, Namespace: "a"},
		"another resource":  {Server: own.Server, Identity: own.Identity, GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespace: "a"},
	} {
		got = nil
		e.liveChanged("apps/a", s)
		if len(got) != 0 {
			t.Errorf("%s: OnLiveChange %v", name, got)
		}
	}
	got = nil
	e.liveChanged("apps/never-compared", own)
	e.liveChanged("not-a-tracking-value", own)
	if len(got) != 0 {
		t.Errorf("an Application never compared, a bad value: OnLiveChange %v", got)
	}

	// A later comparison replaces the scopes; entries not refreshed within
	// the TTL go.
	e.watching.Set("apps/a", "https://one", own.Identity, gvrs([]listTarget{{gvr: cms, namespace: "c"}}), now)
	if e.watching.Has("apps/a", own) {
		t.Error("the scopes of an earlier comparison are kept")
	}
	e.watching.Set("apps/a", "https://one", own.Identity, gvrs([]listTarget{{gvr: cms, namespace: "a"}}), now)
	e.watching.Set("apps/other", "https://one", own.Identity, nil, now.Add(livestate.DefaultIdleTimeout+time.Minute))
	if e.watching.Has("apps/a", own) {
		t.Error("an entry older than the TTL is kept")
	}
}
