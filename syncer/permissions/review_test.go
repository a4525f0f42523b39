package permissions

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	gvrConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	gvrNamespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// fakeAsker answers from maps: allowed holds "VERB RESOURCE NAMESPACE NAME"
// (NAME "" for every name), existing "RESOURCE NAMESPACE NAME".
type fakeAsker struct {
	allowed, existing map[string]bool
	// fail makes Can fail (or panic, when it is "panic") for a verb.
	fail map[string]string

	mu    sync.Mutex
	asked []string
}

func (f *fakeAsker) Can(_ context.Context, verb, group, resource, namespace, name string) (bool, error) {
	q := strings.Join([]string{verb, ResourceString(group, resource), namespace, name}, " ")
	f.mu.Lock()
	f.asked = append(f.asked, q)
	f.mu.Unlock()
	switch msg := f.fail[verb]; msg {
	case "":
	case "panic":
		panic("the fake asker panicked")
	case "forbidden":
		return false, apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}, "", errors.New("no"))
	default:
		return false, errors.New(msg)
	}
	return f.allowed[q], nil
}

func (f *fakeAsker) Exists(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) (bool, error) {
	if name == "broken" {
		return false, errors.New("cannot tell")
	}
	return f.existing[strings.Join([]string{gvr.Resource, namespace, name}, " ")], nil
}

func (f *fakeAsker) Who() string { return "alice" }

func TestReview(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name              string
		add               func(s *Set)
		allowed, existing []string
		want              []Permission
		asked             int
	}{
		{
			name: "allowed for every name: one question per check",
			add: func(s *Set) {
				s.Add("patch", gvrConfigMaps, "x", "a", "ConfigMap x/a")
				s.Add("patch", gvrConfigMaps, "x", "b", "ConfigMap x/b")
				s.Add("list", gvrConfigMaps, "x", "", "to see")
			},
			allowed: []string{"patch configmaps x ", "list configmaps x "},
			asked:   2,
		},
		{
			name: "denied for some names: those names",
			add: func(s *Set) {
				for _, n := range []string{"a", "b", "c"} {
					s.Add("patch", gvrConfigMaps, "x", n, "ConfigMap x/"+n)
				}
			},
			allowed: []string{"patch configmaps x b"},
			want: []Permission{{Verb: "patch", Resource: "configmaps", Namespace: "x", Names: []string{"a", "c"},
				Objects: []string{"ConfigMap x/a", "ConfigMap x/c"}}},
			asked: 4,
		},
		{
			name: "denied for every name: for every name",
			add: func(s *Set) {
				s.Add("patch", gvrConfigMaps, "x", "a", "ConfigMap x/a")
				s.Add("patch", gvrConfigMaps, "x", "b", "ConfigMap x/b")
			},
			want:  []Permission{{Verb: "patch", Resource: "configmaps", Namespace: "x", Objects: []string{"ConfigMap x/a", "ConfigMap x/b"}}},
			asked: 3,
		},
		{
			name: "denied without a name",
			add: func(s *Set) {
				s.Add("create", gvrNamespaces, "", "", "Namespace x (CreateNamespace=true)")
				s.Add("list", gvrConfigMaps, "x", "", "to see")
			},
			allowed: []string{"list configmaps x "},
			want:    []Permission{{Verb: "create", Resource: "namespaces", Objects: []string{"Namespace x (CreateNamespace=true)"}}},
			asked:   2,
		},
		{
			name: "a denied create of an existing object is not needed; of a missing one, or one that cannot be looked up, it is",
			add: func(s *Set) {
				for _, n := range []string{"a", "b", "broken", "d"} {
					s.Add("create", gvrConfigMaps, "x", n, "ConfigMap x/"+n)
				}
			},
			existing: []string{"configmaps x a", "configmaps x d"},
			want: []Permission{{Verb: "create", Resource: "configmaps", Namespace: "x", Names: []string{"b", "broken"},
				Objects: []string{"ConfigMap x/b", "ConfigMap x/broken"}}},
			asked: 5,
		},
		{
			name: "a denied create of existing objects only is not needed",
			add: func(s *Set) {
				s.Add("create", gvrConfigMaps, "x", "a", "ConfigMap x/a")
			},
			existing: []string{"configmaps x a"},
			asked:    2,
		},
		{
			name: "a denied create of an existing object that is re-created is needed",
			add: func(s *Set) {
				s.Add("create", gvrConfigMaps, "x", "a", "ConfigMap x/a")
				s.Add(VerbRecreate, gvrConfigMaps, "x", "hook", "ConfigMap x/hook (re-created)")
			},
			existing: []string{"configmaps x a", "configmaps x hook"},
			want: []Permission{{Verb: "create", Resource: "configmaps", Namespace: "x", Names: []string{"hook"},
				Objects: []string{"ConfigMap x/hook (re-created)"}}},
			asked: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &fakeAsker{allowed: map[string]bool{}, existing: map[string]bool{}}
			for _, q := range tc.allowed {
				a.allowed[q] = true
			}
			for _, o := range tc.existing {
				a.existing[o] = true
			}
			var s Set
			tc.add(&s)
			for _, limit := range []int{0, 1, 3} {
				a.asked = nil
				got, err := Review(ctx, a, s.Checks(), limit)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("limit %d: missing (-want +got):\n%s", limit, diff)
				}
				if len(a.asked) != tc.asked {
					t.Errorf("limit %d: asked %d questions, want %d: %q", limit, len(a.asked), tc.asked, a.asked)
				}
			}
		})
	}
}

func TestReviewErrors(t *testing.T) {
	ctx := context.Background()
	var s Set
	s.Add("list", gvrConfigMaps, "x", "", "to see")
	s.Add("patch", gvrConfigMaps, "x", "a", "ConfigMap x/a")
	s.Add("get", gvrConfigMaps, "x", "a", "ConfigMap x/a")
	for _, tc := range []struct {
		name string
		fail map[string]string
		want string
	}{
		{"the first error wins", map[string]string{"list": "boom", "get": "bang"},
			"preflight: cannot ask kube-apiserver whether alice may list configmaps: boom"},
		{"the error of a later check", map[string]string{"get": "bang"},
			"preflight: cannot ask kube-apiserver whether alice may get configmaps: bang"},
		{"a forbidden review says what the identity needs", map[string]string{"patch": "forbidden"},
			`preflight: cannot ask kube-apiserver whether alice may patch configmaps: selfsubjectaccessreviews.authorization.k8s.io is forbidden: no; ` +
				"the identity must be allowed to create SelfSubjectAccessReviews (every authenticated user is, through system:basic-user, " +
				"and deputy's impersonation gate allows sync identities to create them as the ServiceAccount)"},
		{"a panic is an error", map[string]string{"patch": "panic"},
			"internal error while checking permissions: the fake asker panicked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &fakeAsker{fail: tc.fail}
			// One at a time, in order: the first check's error is the first.
			got, err := Review(ctx, a, s.Checks(), 1)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Review = %v, %v; want error %q", got, err, tc.want)
			}
			if len(a.asked) != 3 {
				t.Errorf("asked %q: every question of the round is asked", a.asked)
			}
		})
	}
}

func TestSetGroupsByVerbResourceAndNamespace(t *testing.T) {
	var s Set
	s.Add("patch", gvrNamespaces, "", "b", "Namespace b")
	s.Add("patch", gvrNamespaces, "", "a", "Namespace a")
	s.Add("create", gvrNamespaces, "", "", "CreateNamespace")
	s.Add("create", gvrNamespaces, "", "", "again")
	c := s.Checks()
	if len(c) != 2 || !cmp.Equal(c[0].Names, []string{"b", "a"}) || len(c[1].Names) != 0 || !cmp.Equal(c[1].Objects, []string{"CreateNamespace"}) {
		t.Fatalf("checks = %+v %+v", c[0], c[1])
	}
	c[0].SortNames()
	if !cmp.Equal(c[0].Names, []string{"a", "b"}) || !cmp.Equal(c[0].Objects, []string{"Namespace a", "Namespace b"}) {
		t.Errorf("sorted: %+v", c[0])
	}
}
