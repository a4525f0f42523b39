package replay

import (
	"bufio"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// realEvents are events kube-apiserver 1.37 wrote in the e2e test
// TestReplayAuditLog (test/e2e/replay_test.go), in the order it drove them.
func realEvents(t *testing.T) [][]byte {
	t.Helper()
	f, err := os.Open("testdata/kube-apiserver-1.37.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		out = append(out, slices.Clone(s.Bytes()))
	}
	if len(out) != 16 {
		t.Fatalf("%d events in testdata, want 16", len(out))
	}
	return out
}

func TestRebuildOfRealEvents(t *testing.T) {
	lines := realEvents(t)
	rebuilt := func(t *testing.T, i int) (*event, *Request) {
		t.Helper()
		var ev event
		if reason, ok := decodeEvent(lines[i], &ev); !ok {
			t.Fatalf("line %d: %s", i+1, reason)
		}
		r, reason := rebuild(&ev)
		if r == nil {
			t.Fatalf("line %d: %s", i+1, reason)
		}
		return &ev, r
	}
	t.Run("an allowed create is authorized without the name the event got from its body", func(t *testing.T) {
		ev, r := rebuilt(t, 0)
		a := r.Attributes
		if ev.ObjectRef.Name != "replay-cm" || a.Name != "" || a.Verb != "create" || a.Resource != "configmaps" || a.Namespace != "replay-a" || !a.ResourceRequest {
			t.Errorf("objectRef %+v rebuilt as %+v", ev.ObjectRef, a)
		}
		if r.Wanted != nil || a.User.GetName() != "replay-ann" || !slices.Equal(a.User.GetGroups(), []string{"replay-team", "system:authenticated"}) {
			t.Errorf("user %+v wanted %+v", a.User, r.Wanted)
		}
		if len(a.User.GetExtra()["authentication.kubernetes.io/credential-id"]) != 1 {
			t.Errorf("extra lost: %+v", a.User.GetExtra())
		}
	})
	t.Run("a get keeps its name", func(t *testing.T) {
		_, r := rebuilt(t, 4)
		if r.Attributes.Name != "replay-cm" || r.Attributes.Verb != "get" {
			t.Errorf("%+v", r.Attributes)
		}
	})
	t.Run("a forbidden request records forbid", func(t *testing.T) {
		ev, _ := rebuilt(t, 6)
		if ev.Annotations[DecisionAnnotation] != "forbid" || ev.ResponseStatus.Code != 403 {
			t.Errorf("%+v", ev)
		}
	})
	t.Run("a non-resource request is its path", func(t *testing.T) {
		_, r := rebuilt(t, 9)
		if r.Attributes.ResourceRequest || r.Attributes.Path != "/apis" || r.Attributes.Verb != "get" {
			t.Errorf("%+v", r.Attributes)
		}
	})
	t.Run("an impersonated user with a group asked for that group only", func(t *testing.T) {
		_, r := rebuilt(t, 12)
		if r.Requestor.GetName() != "replay-ann" || r.Attributes.User.GetName() != "replay-target" {
			t.Fatalf("requestor %+v user %+v", r.Requestor, r.Attributes.User)
		}
		if !slices.Equal(r.Wanted.Groups, []string{"replay-imp-group"}) || r.Wanted.Name != "replay-target" {
			t.Errorf("wanted %+v", r.Wanted)
		}
		if !slices.Equal(r.Attributes.User.GetGroups(), []string{"replay-imp-group", "system:authenticated"}) {
			t.Errorf("the request runs with the groups kube-apiserver gave: %v", r.Attributes.User.GetGroups())
		}
	})
	t.Run("an impersonated ServiceAccount asked for no group", func(t *testing.T) {
		_, r := rebuilt(t, 14)
		if r.Wanted.Name != "system:serviceaccount:replay-a:replay-sa" || len(r.Wanted.Groups) != 0 {
			t.Errorf("wanted %+v", r.Wanted)
		}
	})
	t.Run("a denied impersonation records neither decision nor target", func(t *testing.T) {
		var ev event
		if _, ok := decodeEvent(lines[15], &ev); !ok {
			t.Fatal("not decoded")
		}
		if _, ok := ev.Annotations[DecisionAnnotation]; ok || ev.ImpersonatedUser != nil || ev.ResponseStatus.Code != 403 {
			t.Errorf("%+v", ev)
		}
	})
	t.Run("unauthenticated and garbage", func(t *testing.T) {
		var ev event
		if reason, ok := decodeEvent([]byte("garbage"), &ev); ok || reason != ReasonNotJSON {
			t.Errorf("garbage: %q", reason)
		}
		if reason, ok := decodeEvent([]byte(`{"kind":"Pod","apiVersion":"v1"}`), &ev); ok || reason != ReasonNotEvent {
			t.Errorf("pod: %q", reason)
		}
		unauth := strings.Replace(string(lines[0]), `"username":"replay-ann"`, `"username":""`, 1)
		if _, ok := decodeEvent([]byte(unauth), &ev); !ok {
			t.Fatal("not decoded")
		}
		if r, reason := rebuild(&ev); r != nil || reason != ReasonUnauth {
			t.Errorf("no user: %q", reason)
		}
	})
}

// TestRebuildWanted: kube-apiserver's additions to an impersonated user are
// undone.
func TestRebuildWanted(t *testing.T) {
	for _, tc := range []struct {
		name, user, constraint string
		groups, want           []string
	}{
		{"user without groups", "bob", "", []string{"system:authenticated"}, nil},
		{"user with groups", "bob", "", []string{"a", "b", "system:authenticated"}, []string{"a", "b"}},
		{"user who asked for system:authenticated first", "bob", "", []string{"system:authenticated", "a"}, []string{"system:authenticated", "a"}},
		{"anonymous", "system:anonymous", "", []string{"system:unauthenticated"}, nil},
		{"service account", "system:serviceaccount:ns:sa", "impersonate:serviceaccount", []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"}, nil},
		{"service account with explicit groups (legacy)", "system:serviceaccount:ns:sa", "", []string{"g", "system:authenticated"}, []string{"g"}},
		{"node in a node mode", "system:node:n1", "impersonate:arbitrary-node", []string{"system:nodes", "system:authenticated"}, nil},
		{"node in legacy mode", "system:node:n1", "", []string{"system:nodes", "system:authenticated"}, []string{"system:nodes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev event
			ev.User.Username = tc.user
			ev.User.Groups = tc.groups
			w := rebuildWanted(&ev.User, tc.constraint)
			if !slices.Equal(w.Groups, tc.want) {
				t.Errorf("groups %v, want %v", w.Groups, tc.want)
			}
		})
	}
}

// TestEventIsSubsetOfAuditEvent: every field of the decode struct has the
// JSON name and type of auditv1.Event's field (ResponseStatus and the
// timestamp are decoded into smaller types on purpose).
func TestEventIsSubsetOfAuditEvent(t *testing.T) {
	full := reflect.TypeFor[auditv1.Event]()
	byJSON := map[string]reflect.StructField{}
	for i := range full.NumField() {
		f := full.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous {
			for j := range f.Type.NumField() {
				g := f.Type.Field(j)
				n, _, _ := strings.Cut(g.Tag.Get("json"), ",")
				byJSON[n] = g
			}
			continue
		}
		byJSON[name] = f
	}
	mine := reflect.TypeFor[event]()
	for i := range mine.NumField() {
		f := mine.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		up, ok := byJSON[name]
		if !ok {
			t.Errorf("field %s (json %q) is not in audit.k8s.io/v1 Event", f.Name, name)
			continue
		}
		if up.Name != f.Name {
			t.Errorf("field %s is %s upstream", f.Name, up.Name)
		}
		if name != "responseStatus" && name != "requestReceivedTimestamp" && up.Type != f.Type {
			t.Errorf("field %s: type %s, upstream %s", f.Name, f.Type, up.Type)
		}
	}
}

// FuzzDecodeAndReplay: no line makes decoding, rebuilding or deciding
// panic, and a rebuilt request always has a user and a verb.
func FuzzDecodeAndReplay(f *testing.F) {
	f.Add([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"ResponseComplete","verb":"get","requestURI":"/api","user":{"username":"a"},"impersonatedUser":{"username":"system:node:n1","groups":["system:nodes","system:authenticated"]},"authenticationMetadata":{"impersonationConstraint":"impersonate:arbitrary-node"}}`))
	f.Add([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","stage":"Panic","verb":"create","requestURI":"/x","user":{"username":"a","extra":{"K":["",""]}},"impersonatedUser":{"username":"b","uid":"u","groups":["","system:masters","a","b"],"extra":{"Bad Key":[]}},"objectRef":{"resource":"pods"}}`))
	f.Add([]byte("garbage"))
	allowAll := deciderFunc(func(authorizer.Attributes) bool { return true })
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev event
		if _, ok := decodeEvent(data, &ev); !ok {
			return
		}
		r, reason := rebuild(&ev)
		if r == nil {
			if reason == "" {
				t.Fatal("no request and no reason")
			}
			return
		}
		if r.Attributes.User == nil || r.Attributes.Verb == "" {
			t.Fatalf("rebuilt %+v", r.Attributes)
		}
		DecideRequest(t.Context(), allowAll, r)
	})
}
