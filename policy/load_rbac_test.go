package policy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"

	"deputy.dev/deputy/policy"
)

const loadAPIVersion = "apiVersion: rbac.authorization.k8s.io/v1\n"

func loadClusterRole(name string) string {
	return loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: " + name + "\nrules:\n- verbs: [get]\n  apiGroups: [\"\"]\n  resources: [pods]\n"
}

func loadRole(ns, name string) string {
	return loadAPIVersion + "kind: Role\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nrules:\n- verbs: [get]\n  apiGroups: [\"\"]\n  resources: [pods]\n"
}

func loadCRB(name, role, user string) string {
	return loadAPIVersion + "kind: ClusterRoleBinding\nmetadata:\n  name: " + name +
		"\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: " + role +
		"\nsubjects:\n- kind: User\n  apiGroup: rbac.authorization.k8s.io\n  name: " + user + "\n"
}

// loadKeys lists the decoded objects as "Kind ns/name", kind by kind in the
// order Decode keeps them.
func loadKeys(objs *policy.Objects) []string {
	var out []string
	for _, o := range objs.RBAC.Roles {
		out = append(out, "Role "+o.Namespace+"/"+o.Name)
	}
	for _, o := range objs.RBAC.ClusterRoles {
		out = append(out, "ClusterRole "+o.Name)
	}
	for _, o := range objs.RBAC.RoleBindings {
		out = append(out, "RoleBinding "+o.Namespace+"/"+o.Name)
	}
	for _, o := range objs.RBAC.ClusterRoleBindings {
		out = append(out, "ClusterRoleBinding "+o.Name)
	}
	for _, p := range objs.Projects {
		out = append(out, "AppProject "+p.Group+" "+p.Object.Namespace+"/"+p.Object.Name)
	}
	return out
}

// loadDecode decodes files given as name, content pairs.
func loadDecode(t *testing.T, nameContent ...string) (*policy.Objects, error) {
	t.Helper()
	var files []policy.SourceFile
	for i := 0; i < len(nameContent); i += 2 {
		files = append(files, policy.SourceFile{Name: nameContent[i], Data: []byte(nameContent[i+1])})
	}
	return policy.Decode(files)
}

// loadCheckErrors asserts err is errors.Join of *DocumentError values (as
// Decode documents) and returns their texts.
func loadCheckErrors(t *testing.T, err error) []string {
	t.Helper()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T (%v) is not an errors.Join result", err, err)
	}
	var out []string
	for _, e := range joined.Unwrap() {
		var de *policy.DocumentError
		if !errors.As(e, &de) || de != e {
			t.Errorf("joined error %T (%v) is not a *policy.DocumentError", e, e)
		}
		out = append(out, e.Error())
	}
	return out
}

func TestDecodeDocuments(t *testing.T) {
	tests := []struct {
		name     string
		files    []string // name, content pairs
		want     []string
		wantErrs []string
	}{
		{
			name:  "an empty file holds nothing",
			files: []string{"empty.yaml", ""},
		},
		{
			name:  "a file of comments and separators holds nothing",
			files: []string{"c.yaml", "# nothing yet\n---\n\n# still nothing\n---\n"},
		},
		{
			name:  "documents are split at --- lines and comment-only documents are skipped",
			files: []string{"a.yaml", "# header comment\n---\n" + loadClusterRole("one") + "---\n# only a comment\n---\n" + loadClusterRole("two")},
			want:  []string{"ClusterRole one", "ClusterRole two"},
		},
		{
			name: "separators may carry trailing blanks, tabs, carriage returns and comments",
			files: []string{"a.yaml", loadClusterRole("one") + "--- \n" + loadClusterRole("two") + "---\t\n" + loadClusterRole("three") +
				"--- # four follows\n" + loadClusterRole("four") + "---\r\n" + loadClusterRole("five")},
			want: []string{"ClusterRole one", "ClusterRole two", "ClusterRole three", "ClusterRole four", "ClusterRole five"},
		},
		{
			name:  "a file with CRLF line endings decodes",
			files: []string{"crlf.yaml", strings.ReplaceAll(loadClusterRole("one")+"---\n"+loadClusterRole("two"), "\n", "\r\n")},
			want:  []string{"ClusterRole one", "ClusterRole two"},
		},
		{
			name:  "content on the separator line starts the next document",
			files: []string{"flow.yaml", loadClusterRole("one") + "--- {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: two}}\n"},
			want:  []string{"ClusterRole one", "ClusterRole two"},
		},
		{
			name:  "a document end marker ... ends a document, with or without a --- after it",
			files: []string{"end.yaml", loadClusterRole("one") + "...\n" + loadClusterRole("two") + "... # end\n# comment\n---\n" + loadClusterRole("three") + "...\n"},
			want:  []string{"ClusterRole one", "ClusterRole two", "ClusterRole three"},
		},
		{
			name:     "documents are counted once across ... and ---",
			files:    []string{"end.yaml", loadClusterRole("one") + "...\n---\n" + loadClusterRole("two") + "---\nkind: Role\n"},
			wantErrs: []string{`end.yaml: document 3 (line 20): apiVersion and kind are required (e.g. apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole)`},
		},
		{
			name:     "a JSON file holds one JSON value",
			files:    []string{"two.json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"one"}} {"kind":"x"}`},
			wantErrs: []string{"two.json: document 1 (line 1): not valid JSON: invalid character '{' after top-level value"},
		},
		{
			name: "an indented --- inside a block scalar is not a separator",
			files: []string{"block.yaml", loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: one\n  annotations:\n    note: |\n      before\n      ---\n      after\n" +
				"rules: []\n"},
			want: []string{"ClusterRole one"},
		},
		{
			name:     "--- without a following blank is not a separator",
			files:    []string{"dashes.yaml", loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: one\n  annotations:\n    note: >-\n      x\n---not-a-separator: 1\n"},
			wantErrs: []string{`dashes.yaml: document 1 (line 1), ClusterRole "one": unknown field "---not-a-separator" (fix or remove the field)`},
		},
		{
			name: "a kind: List contributes its items",
			files: []string{"list.yaml", "apiVersion: v1\nkind: List\nitems:\n" +
				indentItem(loadClusterRole("one")) + indentItem(loadCRB("b", "one", "alice")) + indentItem(loadRole("ns", "r"))},
			want: []string{"Role ns/r", "ClusterRole one", "ClusterRoleBinding b"},
		},
		{
			name:     "a List is decoded strictly too",
			files:    []string{"list.yaml", "apiVersion: v1\nkind: List\nItems:\n" + indentItem(loadClusterRole("one"))},
			wantErrs: []string{`list.yaml: document 1 (line 1): unknown field "Items" (fix or remove the field)`},
		},
		{
			name:  "an empty List holds nothing",
			files: []string{"list.yaml", "apiVersion: v1\nkind: List\nitems: []\n"},
		},
		{
			name: "errors inside a List name the item",
			files: []string{"list.yaml", loadClusterRole("zero") + "---\napiVersion: v1\nkind: List\nitems:\n" +
				indentItem(loadClusterRole("one")) + indentItem(loadAPIVersion+"kind: ClusterRole\nmetadata:\n  name: two\nrulez: []\n") +
				"- apiVersion: v1\n  kind: List\n  items: []\n"},
			wantErrs: []string{
				`list.yaml: document 2 (line 10), item 2, ClusterRole "two": unknown field "rulez" (fix or remove the field)`,
				`list.yaml: document 2 (line 10), item 3: a List may not contain a List`,
			},
		},
		{
			name:  "a JSON file is one document",
			files: []string{"one.json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"one"},"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]}`},
			want:  []string{"ClusterRole one"},
		},
		{
			name: "a JSON file may hold a List",
			files: []string{"list.json", `{"apiVersion":"v1","kind":"List","items":[` +
				`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"one"}},` +
				`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"two"}}]}`},
			want: []string{"ClusterRole one", "ClusterRole two"},
		},
		{
			name:     "a JSON file is not split at --- lines",
			files:    []string{"two.json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"one"}}` + "\n---\n" + `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"two"}}`},
			wantErrs: []string{"two.json: document 1 (line 1): not valid JSON: invalid character '-' after top-level value"},
		},
		{
			name:  "file extensions are matched case-insensitively and .yml is YAML",
			files: []string{"A.YAML", loadClusterRole("one"), "b.yml", loadClusterRole("two"), "C.Json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"three"}}`},
			want:  []string{"ClusterRole one", "ClusterRole two", "ClusterRole three"},
		},
		{
			name:     "a file of another type is an error",
			files:    []string{"policy.txt", loadClusterRole("one")},
			wantErrs: []string{"policy.txt: unsupported file type: policy files end in .yaml, .yml, .json (objects) or .csv (tokens)"},
		},
		{
			name: "every problem of every file is reported, each with file, document and line",
			files: []string{
				"a.yaml", loadClusterRole("ok") + "---\n" + loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: bad\nverbs: []\n",
				"b.yaml", "\n\n# third line\n---\nkind: Role\n",
			},
			wantErrs: []string{
				`a.yaml: document 2 (line 10), ClusterRole "bad": unknown field "verbs" (fix or remove the field)`,
				`b.yaml: document 2 (line 5): apiVersion and kind are required (e.g. apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := loadDecode(t, tc.files...)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("Decode = %v, want errors %q", loadKeys(objs), tc.wantErrs)
				}
				if objs != nil {
					t.Errorf("Decode returned objects along with the error")
				}
				if diff := cmp.Diff(tc.wantErrs, loadCheckErrors(t, err)); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, loadKeys(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

// indentItem turns a YAML document into an item of a List's items.
func indentItem(doc string) string {
	lines := strings.Split(strings.TrimSuffix(doc, "\n"), "\n")
	for i := range lines {
		if i == 0 {
			lines[i] = "- " + lines[i]
		} else {
			lines[i] = "  " + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content string
		wantErr string
	}{
		{
			name:    "an unknown top-level field is an error naming file, document and line",
			file:    "roles.yaml",
			content: loadClusterRole("first") + "---\n\n" + loadClusterRole("x") + "rulez: []\n",
			wantErr: `roles.yaml: document 2 (line 10), ClusterRole "x": unknown field "rulez" (fix or remove the field)`,
		},
		{
			name:    "an unknown nested field is an error with its path",
			file:    "roles.yaml",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: x\n  labelz: {}\nrules:\n- verb: [get]\n  apiGroups: [\"\"]\n  resources: [pods]\n",
			wantErr: `roles.yaml: document 1 (line 1), ClusterRole "x": unknown field "metadata.labelz"; unknown field "rules[0].verb" (fix or remove the field)`,
		},
		{
			name:    "a field name in the wrong case is an unknown field",
			file:    "roles.yaml",
			content: loadAPIVersion + "kind: ClusterRoleBinding\nmetadata:\n  name: b\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  Kind: ClusterRole\n  name: view\n",
			wantErr: `roles.yaml: document 1 (line 1), ClusterRoleBinding "b": unknown field "roleRef.Kind" (fix or remove the field)`,
		},
		{
			name:    "apiVersion in the wrong case is missing",
			file:    "roles.yaml",
			content: "apiversion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: x\n",
			wantErr: `roles.yaml: document 1 (line 1): apiVersion and kind are required (e.g. apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole)`,
		},
		{
			name:    "a duplicate field in YAML is an error",
			file:    "roles.yaml",
			content: "# leading comment\n---\n" + loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: x\n  name: y\n",
			wantErr: "roles.yaml: document 2 (line 3): not valid YAML: yaml: unmarshal errors:\n  line 5: key \"name\" already set in map",
		},
		{
			name:    "a duplicate field in JSON is an error",
			file:    "roles.json",
			content: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"x"},"rules":[],"rules":[]}`,
			wantErr: "roles.json: document 1 (line 1): not valid JSON: yaml: unmarshal errors:\n  line 1: key \"rules\" already set in map",
		},
		{
			name:    "a value of the wrong type is an error",
			file:    "roles.yaml",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: x\nrules:\n- verbs: get\n",
			wantErr: `roles.yaml: document 1 (line 1), ClusterRole "x": json: cannot unmarshal string into Go struct field PolicyRule.rules.verbs of type []string`,
		},
		{
			name:    "a deputy.dev AppProject is decoded strictly",
			file:    "projects.yaml",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata:\n  name: p\n  namespace: argocd\nspec:\n  sourceRepoz: []\n",
			wantErr: `projects.yaml: document 1 (line 1), AppProject "argocd/p": unknown field "spec.sourceRepoz" (fix or remove the field)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := loadDecode(t, tc.file, tc.content)
			if err == nil {
				t.Fatalf("Decode = %v, want error %q", loadKeys(objs), tc.wantErr)
			}
			if diff := cmp.Diff([]string{tc.wantErr}, loadCheckErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("an argoproj.io AppProject is decoded leniently", func(t *testing.T) {
		objs, err := loadDecode(t, "projects.yaml", "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: p\n  namespace: argocd\nspec:\n  orphanedResources: {warn: true}\n")
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if diff := cmp.Diff([]string{"AppProject argoproj.io argocd/p"}, loadKeys(objs)); diff != "" {
			t.Errorf("objects (-want +got):\n%s", diff)
		}
	})
}

func TestDecodeUnsupportedKinds(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{
			name:    "a core kind is not policy",
			content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: ns\n",
			wantErr: `p.yaml: document 1 (line 1), ConfigMap "ns/x": unsupported apiVersion/kind v1 ConfigMap: policy files hold rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding, AppProject of deputy.dev/v1alpha1 or argoproj.io/v1alpha1, Application of deputy.dev/v1alpha1, and apiextensions.k8s.io/v1 CustomResourceDefinition`,
		},
		{
			name:    "an RBAC kind of an older version is not supported",
			content: "apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: ClusterRole\nmetadata:\n  name: x\n",
			wantErr: `p.yaml: document 1 (line 1), ClusterRole "x": unsupported apiVersion/kind rbac.authorization.k8s.io/v1beta1 ClusterRole: policy files hold rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding, AppProject of deputy.dev/v1alpha1 or argoproj.io/v1alpha1, Application of deputy.dev/v1alpha1, and apiextensions.k8s.io/v1 CustomResourceDefinition`,
		},
		{
			name:    "a kind in the wrong case is not supported",
			content: "apiVersion: rbac.authorization.k8s.io/v1\nkind: clusterrole\nmetadata:\n  name: x\n",
			wantErr: `p.yaml: document 1 (line 1), clusterrole "x": unsupported apiVersion/kind rbac.authorization.k8s.io/v1 clusterrole: policy files hold rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding, AppProject of deputy.dev/v1alpha1 or argoproj.io/v1alpha1, Application of deputy.dev/v1alpha1, and apiextensions.k8s.io/v1 CustomResourceDefinition`,
		},
		{
			name:    "a document without kind is an error",
			content: "apiVersion: rbac.authorization.k8s.io/v1\nmetadata:\n  name: x\n",
			wantErr: `p.yaml: document 1 (line 1): apiVersion and kind are required (e.g. apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole)`,
		},
		{
			name:    "a scalar document is not an object",
			content: "just text\n",
			wantErr: `p.yaml: document 1 (line 1): not a Kubernetes object: json: cannot unmarshal string into Go value of type policy.typeMeta`,
		},
		{
			name:    "a sequence document is not an object",
			content: "- a\n- b\n",
			wantErr: `p.yaml: document 1 (line 1): not a Kubernetes object: json: cannot unmarshal array into Go value of type policy.typeMeta`,
		},
		{
			name:    "invalid YAML is an error",
			content: "a: [\n",
			wantErr: "p.yaml: document 1 (line 1): not valid YAML: yaml: line 1: did not find expected node content",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := loadDecode(t, "p.yaml", tc.content)
			if err == nil {
				t.Fatalf("Decode = %v, want error %q", loadKeys(objs), tc.wantErr)
			}
			if diff := cmp.Diff([]string{tc.wantErr}, loadCheckErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeDuplicates(t *testing.T) {
	tests := []struct {
		name     string
		files    []string
		want     []string
		wantErrs []string
	}{
		{
			name:     "the same ClusterRole in two files names both locations",
			files:    []string{"a.yaml", loadClusterRole("x"), "b.yaml", "# comment\n---\n" + loadClusterRole("x")},
			wantErrs: []string{`b.yaml: document 2 (line 3), ClusterRole "x": duplicate object: already defined at a.yaml document 1 (each object may be defined once)`},
		},
		{
			name:     "the same object twice in one file is a duplicate",
			files:    []string{"a.yaml", loadCRB("b", "r", "alice") + "---\n" + loadCRB("b", "r", "bob")},
			wantErrs: []string{`a.yaml: document 2 (line 14), ClusterRoleBinding "b": duplicate object: already defined at a.yaml document 1 (each object may be defined once)`},
		},
		{
			name: "a duplicate inside a List names the item",
			files: []string{"a.yaml", loadRole("ns", "r"), "list.yaml", "apiVersion: v1\nkind: List\nitems:\n" +
				indentItem(loadClusterRole("c")) + indentItem(loadRole("ns", "r"))},
			wantErrs: []string{`list.yaml: document 1 (line 1), item 2, Role "ns/r": duplicate object: already defined at a.yaml document 1 (each object may be defined once)`},
		},
		{
			name:  "the same name in two namespaces, or of two kinds, is no duplicate",
			files: []string{"a.yaml", loadRole("ns1", "x") + "---\n" + loadRole("ns2", "x") + "---\n" + loadClusterRole("x") + "---\n" + loadCRB("x", "x", "alice")},
			want:  []string{"Role ns1/x", "Role ns2/x", "ClusterRole x", "ClusterRoleBinding x"},
		},
		{
			name: "a Role and a ClusterRole may share a name, and an AppProject of each group too",
			files: []string{"a.yaml", loadRole("argocd", "p") + "---\n" + loadClusterRole("p") + "---\n" +
				"apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: p\n  namespace: argocd\n---\n" +
				"apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata:\n  name: p\n  namespace: argocd\n"},
			want: []string{"Role argocd/p", "ClusterRole p", "AppProject argoproj.io argocd/p", "AppProject deputy.dev argocd/p"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := loadDecode(t, tc.files...)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("Decode = %v, want errors %q", loadKeys(objs), tc.wantErrs)
				}
				if diff := cmp.Diff(tc.wantErrs, loadCheckErrors(t, err)); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, loadKeys(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeValidation ports the cases of k8s.io/kubernetes
// pkg/apis/rbac/validation/validation_test.go (TestValidateClusterRoleBinding,
// TestValidateRoleBinding, TestValidateRole*) and the defaulting of
// pkg/apis/rbac/v1/defaults.go, through the file decoder.
func TestDecodeValidation(t *testing.T) {
	const (
		crbHead = loadAPIVersion + "kind: ClusterRoleBinding\nmetadata:\n  name: master\n"
		rbHead  = loadAPIVersion + "kind: RoleBinding\nmetadata:\n  name: master\n  namespace: default\n"
		crRef   = "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: valid}\n"
		rRef    = "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: valid}\n"
	)
	tests := []struct {
		name    string
		content string
		wantErr string // "" = valid
	}{
		// TestValidateClusterRoleBinding
		{
			name: "a ClusterRoleBinding to ServiceAccount, User and Group is valid",
			content: crbHead + crRef + "subjects:\n- {kind: ServiceAccount, name: validsaname, namespace: foo}\n" +
				"- {kind: User, name: valid@username, apiGroup: rbac.authorization.k8s.io}\n- {kind: Group, name: valid@groupname, apiGroup: rbac.authorization.k8s.io}\n",
		},
		{
			name:    "a ClusterRoleBinding with a bad roleRef group is rejected",
			content: crbHead + "roleRef: {apiGroup: rbac.GroupName, kind: ClusterRole, name: valid}\n",
			wantErr: `ClusterRoleBinding "master": roleRef.apiGroup: Unsupported value: "rbac.GroupName": supported values: "rbac.authorization.k8s.io"`,
		},
		{
			name:    "a ClusterRoleBinding with a bad roleRef kind is rejected",
			content: crbHead + "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Type, name: valid}\n",
			wantErr: `ClusterRoleBinding "master": roleRef.kind: Unsupported value: "Type": supported values: "ClusterRole"`,
		},
		{
			name:    "a ClusterRoleBinding may not reference a Role",
			content: crbHead + rRef,
			wantErr: `ClusterRoleBinding "master": roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"`,
		},
		{
			name:    "a ClusterRoleBinding needs a name",
			content: loadAPIVersion + "kind: ClusterRoleBinding\nmetadata: {}\n" + crRef,
			wantErr: `ClusterRoleBinding "": metadata.name: Required value: name or generateName is required`,
		},
		{
			name:    "a ClusterRoleBinding needs a roleRef name",
			content: crbHead + "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole}\n",
			wantErr: `ClusterRoleBinding "master": roleRef.name: Required value`,
		},
		{
			name:    "a subject needs a kind",
			content: crbHead + crRef + "subjects:\n- {name: subject}\n",
			wantErr: `ClusterRoleBinding "master": subjects[0].kind: Unsupported value: "": supported values: "ServiceAccount", "User", "Group"`,
		},
		{
			name:    "a ServiceAccount subject needs a valid name",
			content: crbHead + crRef + "subjects:\n- {kind: ServiceAccount, name: 'subject:bad', namespace: foo}\n",
			wantErr: `ClusterRoleBinding "master": subjects[0].name: Invalid value: "subject:bad": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		},
		{
			name:    "a ServiceAccount subject of a ClusterRoleBinding needs a namespace",
			content: crbHead + crRef + "subjects:\n- {kind: ServiceAccount, name: good}\n",
			wantErr: `ClusterRoleBinding "master": subjects[0].namespace: Required value: a ServiceAccount subject of a ClusterRoleBinding needs its namespace`,
		},
		{
			name:    "a subject needs a name",
			content: crbHead + crRef + "subjects:\n- {kind: ServiceAccount, namespace: foo}\n",
			wantErr: `ClusterRoleBinding "master": subjects[0].name: Required value`,
		},
		// TestValidateRoleBinding
		{
			name: "a RoleBinding to ServiceAccount (no namespace), User and Group is valid",
			content: rbHead + rRef + "subjects:\n- {kind: ServiceAccount, name: validsaname}\n" +
				"- {kind: User, name: valid@username, apiGroup: rbac.authorization.k8s.io}\n- {kind: Group, name: valid@groupname, apiGroup: rbac.authorization.k8s.io}\n",
		},
		{
			name:    "a RoleBinding with a bad roleRef group is rejected",
			content: rbHead + "roleRef: {apiGroup: rbac.GroupName, kind: ClusterRole, name: valid}\n",
			wantErr: `RoleBinding "default/master": roleRef.apiGroup: Unsupported value: "rbac.GroupName": supported values: "rbac.authorization.k8s.io"`,
		},
		{
			name:    "a RoleBinding with a bad roleRef kind is rejected",
			content: rbHead + "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Type, name: valid}\n",
			wantErr: `RoleBinding "default/master": roleRef.kind: Unsupported value: "Type": supported values: "Role", "ClusterRole"`,
		},
		{
			name:    "a RoleBinding needs a namespace",
			content: loadAPIVersion + "kind: RoleBinding\nmetadata:\n  name: default\n" + rRef,
			wantErr: `RoleBinding "default": metadata.namespace: Required value: a namespaced object needs metadata.namespace`,
		},
		{
			name:    "a RoleBinding needs a name",
			content: loadAPIVersion + "kind: RoleBinding\nmetadata:\n  namespace: default\n" + rRef,
			wantErr: `RoleBinding "default/": metadata.name: Required value: name or generateName is required`,
		},
		{
			name:    "a RoleBinding needs a roleRef name",
			content: rbHead + "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role}\n",
			wantErr: `RoleBinding "default/master": roleRef.name: Required value`,
		},
		{
			name:    "a RoleBinding subject needs a kind",
			content: rbHead + rRef + "subjects:\n- {name: subject}\n",
			wantErr: `RoleBinding "default/master": subjects[0].kind: Unsupported value: "": supported values: "ServiceAccount", "User", "Group"`,
		},
		{
			name:    "a RoleBinding ServiceAccount subject needs a name",
			content: rbHead + rRef + "subjects:\n- {kind: ServiceAccount}\n",
			wantErr: `RoleBinding "default/master": subjects[0].name: Required value`,
		},
		// Subject apiGroups beyond the defaults.
		{
			name:    "a ServiceAccount subject may not have an apiGroup",
			content: rbHead + rRef + "subjects:\n- {kind: ServiceAccount, name: sa, apiGroup: rbac.authorization.k8s.io}\n",
			wantErr: `RoleBinding "default/master": subjects[0].apiGroup: Unsupported value: "rbac.authorization.k8s.io": supported values: ""`,
		},
		{
			name:    "a User subject of another apiGroup is rejected",
			content: rbHead + rRef + "subjects:\n- {kind: User, name: alice, apiGroup: v1}\n",
			wantErr: `RoleBinding "default/master": subjects[0].apiGroup: Unsupported value: "v1": supported values: "rbac.authorization.k8s.io"`,
		},
		{
			name:    "a binding name may not contain a slash",
			content: loadAPIVersion + "kind: ClusterRoleBinding\nmetadata:\n  name: a/b\n" + crRef,
			wantErr: `ClusterRoleBinding "a/b": metadata.name: Invalid value: "a/b": may not contain '/'`,
		},
		{
			name:    "a roleRef name may not be ..",
			content: crbHead + "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ..}\n",
			wantErr: `ClusterRoleBinding "master": roleRef.name: Invalid value: "..": may not be '..'`,
		},
		{
			name:    "all problems of one object are reported together",
			content: crbHead + "roleRef: {apiGroup: x, kind: Role, name: r}\nsubjects:\n- {kind: Robot, name: r}\n",
			wantErr: `ClusterRoleBinding "master": [roleRef.apiGroup: Unsupported value: "x": supported values: "rbac.authorization.k8s.io", roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole", subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"]`,
		},
		// TestValidateRole*
		{
			name:    "a Role needs a namespace",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: default\n",
			wantErr: `Role "default": metadata.namespace: Required value: a namespaced object needs metadata.namespace`,
		},
		{
			name:    "a Role needs a name",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  namespace: default\n",
			wantErr: `Role "default/": metadata.name: Required value: name or generateName is required`,
		},
		{
			name:    "a Role namespace must be a DNS label",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: r\n  namespace: Not_A_Label\n",
			wantErr: `Role "Not_A_Label/r": metadata.namespace: Invalid value: "Not_A_Label": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
		},
		{
			name:    "a Role with name and namespace and no rules is valid",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: default\n  namespace: default\n",
		},
		{
			name:    "a ClusterRole without namespace is valid",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: default\n",
		},
		{
			name:    "a ClusterRole may grant non-resource URLs",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: default\nrules:\n- {verbs: [get], nonResourceURLs: ['/*']}\n",
		},
		{
			name:    "a Role may not grant non-resource URLs",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: default\n  namespace: default\nrules:\n- {verbs: [get], nonResourceURLs: ['/*']}\n",
			wantErr: `Role "default/default": rules[0].nonResourceURLs: Invalid value: ["/*"]: namespaced rules cannot apply to non-resource URLs`,
		},
		{
			name:    "a non-resource rule needs verbs",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: default\nrules:\n- {verbs: [], nonResourceURLs: ['/*']}\n",
			wantErr: `ClusterRole "default": rules[0].verbs: Required value: verbs must contain at least one value`,
		},
		{
			name:    "a rule may not mix resources and non-resource URLs",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: default\nrules:\n- {verbs: [get], nonResourceURLs: ['/*'], apiGroups: [v1], resources: [pods]}\n",
			wantErr: `ClusterRole "default": rules[0].nonResourceURLs: Invalid value: ["/*"]: rules cannot apply to both regular resources and non-resource URLs`,
		},
		{
			name:    "a resource rule with verbs, groups and resources is valid",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: default\n  namespace: default\nrules:\n- {verbs: [get], apiGroups: [v1], resources: [pods]}\n",
		},
		{
			name:    "a resource rule needs apiGroups",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: default\n  namespace: default\nrules:\n- {verbs: [get], resources: [pods]}\n",
			wantErr: `Role "default/default": rules[0].apiGroups: Required value: resource rules must supply at least one api group`,
		},
		{
			name:    "a resource rule needs resources",
			content: loadAPIVersion + "kind: Role\nmetadata:\n  name: default\n  namespace: default\nrules:\n- {verbs: [get], apiGroups: [v1]}\n",
			wantErr: `Role "default/default": rules[0].resources: Required value: resource rules must supply at least one resource`,
		},
		{
			name:    "an aggregationRule needs at least one selector",
			content: loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: agg\naggregationRule:\n  clusterRoleSelectors: []\n",
			wantErr: `ClusterRole "agg": aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := loadDecode(t, "v.yaml", tc.content)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if n := len(loadKeys(objs)); n != 1 {
					t.Fatalf("Decode returned %d objects, want 1", n)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode = %v, want error %q", loadKeys(objs), tc.wantErr)
			}
			if diff := cmp.Diff([]string{"v.yaml: document 1 (line 1), " + tc.wantErr}, loadCheckErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeDefaults checks SetDefaults_Subject, SetDefaults_RoleBinding and
// SetDefaults_ClusterRoleBinding of pkg/apis/rbac/v1/defaults.go.
func TestDecodeDefaults(t *testing.T) {
	objs, err := loadDecode(t, "d.yaml", loadAPIVersion+"kind: RoleBinding\nmetadata:\n  name: b\n  namespace: ns\n"+
		"roleRef: {kind: Role, name: r}\nsubjects:\n- {kind: User, name: alice}\n- {kind: Group, name: devs}\n- {kind: ServiceAccount, name: sa}\n"+
		"---\n"+loadAPIVersion+"kind: ClusterRoleBinding\nmetadata:\n  name: b\n  namespace: ignored\n"+
		"roleRef: {kind: ClusterRole, name: r}\nsubjects:\n- {kind: ServiceAccount, name: sa, namespace: ns}\n"+
		"---\n"+loadAPIVersion+"kind: ClusterRole\nmetadata:\n  name: c\n  namespace: ignored\n")
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	rb := objs.RBAC.RoleBindings[0]
	wantSubjects := []rbacv1.Subject{
		{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"},
		{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "devs"},
		// The namespace of a ServiceAccount subject is left empty: it
		// defaults to the binding's when evaluated, as upstream does.
		{Kind: "ServiceAccount", Name: "sa"},
	}
	if diff := cmp.Diff(wantSubjects, rb.Subjects); diff != "" {
		t.Errorf("RoleBinding subjects (-want +got):\n%s", diff)
	}
	if rb.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("RoleBinding roleRef.apiGroup = %q, want the default %q", rb.RoleRef.APIGroup, rbacv1.GroupName)
	}
	crb := objs.RBAC.ClusterRoleBindings[0]
	if crb.RoleRef.APIGroup != rbacv1.GroupName || crb.Namespace != "" {
		t.Errorf("ClusterRoleBinding roleRef.apiGroup = %q, namespace = %q; want %q and none", crb.RoleRef.APIGroup, crb.Namespace, rbacv1.GroupName)
	}
	if ns := objs.RBAC.ClusterRoles[0].Namespace; ns != "" {
		t.Errorf("ClusterRole namespace = %q, want it cleared as kube-apiserver does for cluster-scoped objects", ns)
	}
	if got := objs.RBAC.Sources["RoleBinding/ns/b"]; got != "d.yaml document 1" {
		t.Errorf("Sources[RoleBinding/ns/b] = %q, want d.yaml document 1", got)
	}
	if got := objs.RBAC.Sources["ClusterRoleBinding//b"]; got != "d.yaml document 2" {
		t.Errorf("Sources[ClusterRoleBinding//b] = %q, want d.yaml document 2", got)
	}
}

// TestLoadBindingSources checks that a loaded snapshot remembers where each
// binding came from, for explanations.
func TestLoadBindingSources(t *testing.T) {
	snap, err := policy.Load([]policy.SourceFile{
		{Name: "a.yaml", Data: []byte(loadClusterRole("view"))},
		{Name: "b.yaml", Data: []byte("apiVersion: v1\nkind: List\nitems:\n" + indentItem(loadCRB("b1", "view", "alice")) + indentItem(loadCRB("b2", "view", "bob")))},
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var got []string
	for _, b := range snap.RBAC.ClusterRoleBindings() {
		got = append(got, b.Name+"@"+b.Source)
	}
	if diff := cmp.Diff([]string{"b1@b.yaml document 1 item 1", "b2@b.yaml document 1 item 2"}, got); diff != "" {
		t.Errorf("binding sources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a.yaml", "b.yaml"}, snap.Files); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
	if len(snap.Digest) != 64 {
		t.Errorf("Digest = %q, want a hex SHA-256", snap.Digest)
	}
}

// loadWrite writes content to dir/name (creating dir) and returns the path.
func loadWrite(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadHas reports whether s holds a ClusterRole of each of the names.
func loadHas(s *policy.Snapshot, names ...string) bool {
	if s == nil {
		return false
	}
	for _, n := range names {
		if s.RBAC.ClusterRole(n) == nil {
			return false
		}
	}
	return true
}

func TestFileSourceKeepsLastGoodSnapshot(t *testing.T) {
	dir := t.TempDir()
	p := loadWrite(t, dir, "policy.yaml", loadClusterRole("one"))
	var statuses []policy.Status
	src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{OnLoad: func(s policy.Status) { statuses = append(statuses, s) }})

	t.Run("before the first load nothing is served and the source is not ready", func(t *testing.T) {
		if src.Current() != nil || src.Status().Ready() || src.Status().Loaded {
			t.Errorf("Current() = %v, Status() = %+v; want nothing loaded", src.Current(), src.Status())
		}
	})

	if err := src.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
	good := src.Current()
	t.Run("a good load serves the snapshot and is ready", func(t *testing.T) {
		st := src.Status()
		if !loadHas(good, "one") || !st.Ready() || st.Files != 1 || st.Digest != good.Digest {
			t.Errorf("Current() has one = %v, Status() = %+v", loadHas(good, "one"), st)
		}
	})

	t.Run("loading unchanged files keeps the same snapshot", func(t *testing.T) {
		if err := src.Load(); err != nil {
			t.Fatalf("Load: %v", err)
		}
		if src.Current() != good || !src.Status().Ready() {
			t.Errorf("unchanged files produced a new snapshot or lost readiness")
		}
	})

	loadWrite(t, dir, "policy.yaml", loadClusterRole("one")+"---\n"+loadClusterRole("two")+"bogus: 1\n")
	t.Run("a broken file keeps the last good snapshot and turns readiness red", func(t *testing.T) {
		err := src.Load()
		want := p + `: document 2 (line 10), ClusterRole "two": unknown field "bogus" (fix or remove the field)`
		if err == nil || err.Error() != want {
			t.Fatalf("Load error = %v, want %q", err, want)
		}
		st := src.Status()
		if src.Current() != good {
			t.Errorf("the serving snapshot changed on a failed load")
		}
		if st.Ready() || !st.Loaded || st.LastError == nil || st.LastError.Error() != want {
			t.Errorf("Status() = %+v, want loaded, not ready, with the error", st)
		}
		if st.LastSuccess.After(st.LastAttempt) || !st.LastAttempt.After(st.LastSuccess) {
			t.Errorf("LastAttempt %v should be after LastSuccess %v", st.LastAttempt, st.LastSuccess)
		}
	})

	loadWrite(t, dir, "policy.yaml", loadClusterRole("one")+"---\n"+loadClusterRole("two"))
	t.Run("fixing the file recovers with a new snapshot", func(t *testing.T) {
		if err := src.Load(); err != nil {
			t.Fatalf("Load: %v", err)
		}
		if cur := src.Current(); cur == good || !loadHas(cur, "one", "two") || !src.Status().Ready() {
			t.Errorf("Current() has one and two = %v, Status() = %+v", loadHas(cur, "one", "two"), src.Status())
		}
	})

	t.Run("OnLoad saw every attempt", func(t *testing.T) {
		var ready []bool
		for _, s := range statuses {
			ready = append(ready, s.Ready())
		}
		if diff := cmp.Diff([]bool{true, true, false, true}, ready); diff != "" {
			t.Errorf("readiness per load (-want +got):\n%s", diff)
		}
	})

	t.Run("a missing path is an error naming it", func(t *testing.T) {
		missing := filepath.Join(dir, "missing")
		src := policy.NewFileSource([]string{dir, missing}, policy.FileSourceOptions{})
		err := src.Load()
		if err == nil || !strings.Contains(err.Error(), "policy path "+missing+": ") || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load error = %v, want one naming %s and wrapping ErrNotExist", err, missing)
		}
		if src.Current() != nil || src.Status().Ready() {
			t.Errorf("a source that never loaded serves %v", src.Current())
		}
	})

	t.Run("a file named explicitly must have a policy extension", func(t *testing.T) {
		txt := loadWrite(t, dir, "notes.txt", "hello")
		err := policy.NewFileSource([]string{txt}, policy.FileSourceOptions{}).Load()
		want := "policy file " + txt + ": unsupported file type: use .yaml, .yml, .json (objects) or .csv (tokens)"
		if err == nil || err.Error() != want {
			t.Errorf("Load error = %v, want %q", err, want)
		}
	})
}

func TestFileSourceDirectories(t *testing.T) {
	t.Run("a directory contributes its policy files in name order, skipping dotfiles, other files and subdirectories", func(t *testing.T) {
		dir := t.TempDir()
		loadWrite(t, dir, "b.yaml", loadClusterRole("b"))
		loadWrite(t, dir, "a.yml", loadClusterRole("a"))
		loadWrite(t, dir, "c.json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"c"}}`)
		loadWrite(t, dir, ".hidden.yaml", "this: [is not valid")
		loadWrite(t, dir, "README.md", "not policy")
		loadWrite(t, filepath.Join(dir, "sub"), "nested.yaml", "this: [is not valid")
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{})
		if err := src.Load(); err != nil {
			t.Fatalf("Load: %v", err)
		}
		want := []string{filepath.Join(dir, "a.yml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.json")}
		if diff := cmp.Diff(want, src.Current().Files); diff != "" {
			t.Errorf("Files (-want +got):\n%s", diff)
		}
	})

	t.Run("a ConfigMap volume layout is read through its symlinks, once", func(t *testing.T) {
		dir := t.TempDir()
		loadConfigMapUpdate(t, dir, "..2026_01_01_00_00_00.000000001", map[string]string{"rbac.yaml": loadClusterRole("v1"), "tokens.csv": ""})
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{})
		if err := src.Load(); err != nil {
			t.Fatalf("Load: %v", err)
		}
		want := []string{filepath.Join(dir, "rbac.yaml"), filepath.Join(dir, "tokens.csv")}
		if diff := cmp.Diff(want, src.Current().Files); diff != "" {
			t.Errorf("Files (-want +got):\n%s", diff)
		}
		if !loadHas(src.Current(), "v1") {
			t.Errorf("the ClusterRole behind the symlink was not loaded")
		}
	})

	t.Run("a symlink to a directory inside a policy directory is skipped", func(t *testing.T) {
		dir := t.TempDir()
		loadWrite(t, filepath.Join(dir, "real"), "x.yaml", "this: [is not valid")
		if err := os.Symlink("real", filepath.Join(dir, "link.yaml")); err != nil {
			t.Fatal(err)
		}
		loadWrite(t, dir, "a.yaml", loadClusterRole("a"))
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{})
		if err := src.Load(); err != nil {
			t.Fatalf("Load: %v", err)
		}
		if diff := cmp.Diff([]string{filepath.Join(dir, "a.yaml")}, src.Current().Files); diff != "" {
			t.Errorf("Files (-want +got):\n%s", diff)
		}
	})
}

// loadConfigMapUpdate lays out files as the kubelet does for a ConfigMap
// volume: the data in a timestamped directory, a "..data" symlink to it
// swapped atomically by rename, and one symlink per key into "..data".
func loadConfigMapUpdate(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		loadWrite(t, filepath.Join(dir, stamp), name, content)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(stamp, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

// loadWaitFor polls cond until it holds or the deadline passes; it never
// asserts how long that took.
func loadWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadRun starts src.Run and returns once its watches are in place (Run loads
// after adding them, and loads reports every load); the test's cleanup stops
// it and waits for it to return.
func loadRun(t *testing.T, src *policy.FileSource, loads <-chan policy.Status) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	select {
	case <-loads:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not load")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func loadStatusChan() (chan policy.Status, func(policy.Status)) {
	ch := make(chan policy.Status, 100)
	return ch, func(s policy.Status) {
		select {
		case ch <- s:
		default:
		}
	}
}

func TestFileSourceWatch(t *testing.T) {
	t.Run("a changed file in a watched directory is reloaded without polling", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "policy.yaml", loadClusterRole("one"))
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{OnLoad: onLoad})
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		<-loads
		loadRun(t, src, loads)

		if err := os.WriteFile(p, []byte(loadClusterRole("two")), 0o644); err != nil {
			t.Fatal(err)
		}
		loadWaitFor(t, "the new ClusterRole", func() bool { return loadHas(src.Current(), "two") })

		if err := os.WriteFile(p, []byte("broken: ["), 0o644); err != nil {
			t.Fatal(err)
		}
		loadWaitFor(t, "readiness to turn red", func() bool { return src.Status().LastError != nil })
		if !loadHas(src.Current(), "two") {
			t.Errorf("the last good snapshot is not served after a broken write")
		}

		if err := os.WriteFile(p, []byte(loadClusterRole("three")), 0o644); err != nil {
			t.Fatal(err)
		}
		loadWaitFor(t, "recovery", func() bool { return loadHas(src.Current(), "three") && src.Status().Ready() })
	})

	t.Run("a file named explicitly and replaced by rename is reloaded", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "policy.yaml", loadClusterRole("one"))
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{p}, policy.FileSourceOptions{OnLoad: onLoad})
		loadRun(t, src, loads)
		if !loadHas(src.Current(), "one") {
			t.Fatalf("Run did not load the file")
		}
		tmp := loadWrite(t, dir, ".policy.yaml.swp", loadClusterRole("two"))
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
		loadWaitFor(t, "the renamed-over file", func() bool { return loadHas(src.Current(), "two") })
	})

	t.Run("a ConfigMap update (..data swap) is reloaded", func(t *testing.T) {
		dir := t.TempDir()
		loadConfigMapUpdate(t, dir, "..2026_01_01_00_00_00.000000001", map[string]string{"rbac.yaml": loadClusterRole("v1")})
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{OnLoad: onLoad})
		loadRun(t, src, loads)
		if !loadHas(src.Current(), "v1") {
			t.Fatalf("Run did not load the ConfigMap")
		}
		loadConfigMapUpdate(t, dir, "..2026_01_01_00_01_00.000000002", map[string]string{"rbac.yaml": loadClusterRole("v2")})
		loadWaitFor(t, "the updated ConfigMap", func() bool { return loadHas(src.Current(), "v2") && !loadHas(src.Current(), "v1") })
	})

	t.Run("a change between Load and Run is not missed", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "policy.yaml", loadClusterRole("one"))
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{OnLoad: onLoad})
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		<-loads
		if err := os.WriteFile(p, []byte(loadClusterRole("two")), 0o644); err != nil {
			t.Fatal(err)
		}
		loadRun(t, src, loads)
		if !loadHas(src.Current(), "two") {
			t.Errorf("the change made before Run was not loaded")
		}
	})

	t.Run("polling picks up changes when no event arrives", func(t *testing.T) {
		// The watch on dir/current follows the symlink to dir/a when it is
		// added; re-pointing the symlink at dir/b changes what the files
		// read without any event in dir/a, so only the poll can see it.
		dir := t.TempDir()
		loadWrite(t, filepath.Join(dir, "a"), "policy.yaml", loadClusterRole("one"))
		loadWrite(t, filepath.Join(dir, "b"), "policy.yaml", loadClusterRole("two"))
		current := filepath.Join(dir, "current")
		if err := os.Symlink("a", current); err != nil {
			t.Fatal(err)
		}
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{filepath.Join(current, "policy.yaml")}, policy.FileSourceOptions{OnLoad: onLoad, PollInterval: 50 * time.Millisecond})
		loadRun(t, src, loads)
		if !loadHas(src.Current(), "one") {
			t.Fatalf("Run did not load the file")
		}
		tmp := filepath.Join(dir, "current.tmp")
		if err := os.Symlink("b", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, current); err != nil {
			t.Fatal(err)
		}
		loadWaitFor(t, "the polled change", func() bool { return loadHas(src.Current(), "two") })
	})
}

// FuzzDecode feeds arbitrary bytes to Decode as YAML and JSON files: it must
// never panic, and returns either objects or errors.Join of *DocumentError
// values, never both.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(loadClusterRole("one")+"---\n"+loadCRB("b", "one", "alice")), false)
	f.Add([]byte("# c\n---\n--- {apiVersion: v1, kind: List, items: []}\n"), false)
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n"+indentItem(loadRole("ns", "r"))+"- apiVersion: v1\n  kind: List\n"), false)
	f.Add([]byte(loadAPIVersion+"kind: RoleBinding\nmetadata: {name: b, namespace: ns}\nroleRef: {kind: Role, name: r}\nsubjects: [{kind: ServiceAccount, name: sa}]\n"), false)
	f.Add([]byte(loadAPIVersion+"kind: ClusterRole\nmetadata: {name: a}\naggregationRule: {clusterRoleSelectors: [{matchLabels: {a: b}}]}\n"), false)
	f.Add([]byte("apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata: {name: p, namespace: argocd}\nspec: {destinationServiceAccounts: [{server: '*', namespace: '*', defaultServiceAccount: sa}]}\n"), false)
	f.Add([]byte(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"x"},"rules":[{"verbs":["*"]}]}`), true)
	f.Add([]byte("a: [\n"), false)
	f.Add([]byte("\xef\xbb\xbfapiVersion: v1\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		name := "fuzz.yaml"
		if asJSON {
			name = "fuzz.json"
		}
		objs, err := policy.Decode([]policy.SourceFile{{Name: name, Data: data}})
		if err == nil {
			if objs == nil {
				t.Fatal("Decode returned neither objects nor an error")
			}
			// What decodes must also index (aggregation may still reject
			// a selector, as an error).
			_, _ = policy.Build(objs, true)
			return
		}
		if objs != nil {
			t.Fatalf("Decode returned objects and an error: %v", err)
		}
		joined, ok := err.(interface{ Unwrap() []error })
		if !ok {
			t.Fatalf("error %T is not an errors.Join result: %v", err, err)
		}
		for _, e := range joined.Unwrap() {
			de, ok := e.(*policy.DocumentError)
			if !ok {
				t.Fatalf("error %T is not a *DocumentError: %v", e, e)
			}
			if de.File != name || de.Err == nil || !strings.HasPrefix(de.Error(), name) {
				t.Fatalf("DocumentError %+v does not name the file or has no cause", de)
			}
			if de.Document > 0 && de.Line < 1 {
				t.Fatalf("DocumentError %q has document %d at line %d", de.Error(), de.Document, de.Line)
			}
		}
	})
}

func ExampleDecode() {
	_, err := policy.Decode([]policy.SourceFile{{Name: "rbac.yaml", Data: []byte(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ci
roleRef: {kind: ClusterRole, name: view}
subjects:
- kind: ServiceAccount
  name: ci
`)}})
	fmt.Println(err)
	// Output:
	// rbac.yaml: document 1 (line 1), ClusterRoleBinding "ci": subjects[0].namespace: Required value: a ServiceAccount subject of a ClusterRoleBinding needs its namespace
}
