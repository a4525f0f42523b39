package manifests

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "deputy.dev/deputy/policy/v1alpha1"
)

func crdsByName(t *testing.T) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := CRDs()
	if err != nil {
		t.Fatalf("CRDs: %v", err)
	}
	testCRDs, err := TestingCRDs()
	if err != nil {
		t.Fatalf("TestingCRDs: %v", err)
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range append(crds, testCRDs...) {
		out[c.Name] = c
	}
	return out
}

func TestCRDFilesAreTheEmbeddedCRDs(t *testing.T) {
	files := CRDFiles()
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{DeputyAppProjectCRDFile}, names); diff != "" {
		t.Errorf("CRDFiles names (-want +got):\n%s", diff)
	}
	if _, ok := TestingCRDFiles()[ArgoCDAppProjectCRDFile]; !ok {
		t.Errorf("TestingCRDFiles lacks %s", ArgoCDAppProjectCRDFile)
	}
	files[DeputyAppProjectCRDFile][0] = 'X'
	if CRDFiles()[DeputyAppProjectCRDFile][0] == 'X' {
		t.Errorf("CRDFiles returns shared bytes; callers can corrupt the embedded CRDs")
	}
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != len(names) {
		t.Errorf("CRDs returned %d objects for %d files", len(crds), len(names))
	}
}

// TestCRDsPassKubeAPIServerValidation runs the validation kube-apiserver runs
// on create (structural schema included).
func TestCRDsPassKubeAPIServerValidation(t *testing.T) {
	for name, crd := range crdsByName(t) {
		t.Run(name, func(t *testing.T) {
			crd = crd.DeepCopy()
			apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
			internal := &apiextensions.CustomResourceDefinition{}
			if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
				t.Fatal(err)
			}
			// kube-apiserver's create strategy records the storage version first.
			internal.Status.StoredVersions = []string{policyv1alpha1.Version}
			if errs := apiextensionsvalidation.ValidateCustomResourceDefinition(t.Context(), internal); len(errs) > 0 {
				t.Errorf("kube-apiserver would reject %s:\n%v", name, errs.ToAggregate())
			}
		})
	}
}

func TestDeputyAppProjectCRDNames(t *testing.T) {
	crd := crdsByName(t)["appprojects.deputy.dev"]
	if crd == nil {
		t.Fatal("no CRD appprojects.deputy.dev")
	}
	got := struct {
		Group, Kind, Plural, Scope string
		ShortNames                 []string
		Versions                   []string
	}{crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, string(crd.Spec.Scope), crd.Spec.Names.ShortNames, nil}
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Storage {
			got.Versions = append(got.Versions, v.Name)
		}
	}
	want := got
	want.Group, want.Kind, want.Plural, want.Scope = policyv1alpha1.Group, policyv1alpha1.KindAppProject, "appprojects", "Namespaced"
	want.ShortNames, want.Versions = []string{"appproj"}, []string{policyv1alpha1.Version}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRD names (-want +got):\n%s", diff)
	}

	argo := crdsByName(t)["appprojects.argoproj.io"]
	if argo == nil {
		t.Fatal("no CRD appprojects.argoproj.io")
	}
	spec := argo.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if argo.Spec.Group != policyv1alpha1.ArgoCDGroup || spec.XPreserveUnknownFields == nil || !*spec.XPreserveUnknownFields {
		t.Errorf("argoproj.io CRD: group %q, spec preserves unknown fields = %v; want %q and true", argo.Spec.Group, spec.XPreserveUnknownFields, policyv1alpha1.ArgoCDGroup)
	}
}

// TestDeputyAppProjectSchemaMatchesGoType walks policy/v1alpha1.AppProjectSpec
// and the CRD's spec schema together: every JSON field of the Go type must be
// in the schema (else kube-apiserver prunes it) and the schema must have no
// field the Go type lacks; types, required fields and descriptions must agree.
func TestDeputyAppProjectSchemaMatchesGoType(t *testing.T) {
	crd := crdsByName(t)["appprojects.deputy.dev"]
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	compareSchema(t, "spec", reflect.TypeFor[policyv1alpha1.AppProjectSpec](), spec)
}

func compareSchema(t *testing.T, path string, typ reflect.Type, s apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if s.Description == "" {
		t.Errorf("%s: no description", path)
	}
	switch typ.Kind() {
	case reflect.String:
		if s.Type != "string" {
			t.Errorf("%s: schema type %q, want string", path, s.Type)
		}
	case reflect.Slice:
		if s.Type != "array" || s.Items == nil || s.Items.Schema == nil {
			t.Errorf("%s: schema type %q, want an array with items", path, s.Type)
			return
		}
		item := *s.Items.Schema
		if typ.Elem().Kind() == reflect.String && item.Description == "" {
			item.Description = "(string items need none)"
		}
		compareSchema(t, path+"[]", typ.Elem(), item)
	case reflect.Struct:
		if s.Type != "object" {
			t.Errorf("%s: schema type %q, want object", path, s.Type)
		}
		var fields, required []string
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Fatalf("%s.%s: untagged or inline field; extend this test", path, f.Name)
			}
			fields = append(fields, name)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
			prop, ok := s.Properties[name]
			if !ok {
				t.Errorf("%s.%s: in the Go type but not in the CRD schema (kube-apiserver would prune it)", path, name)
				continue
			}
			compareSchema(t, path+"."+name, f.Type, prop)
		}
		for name := range s.Properties {
			if !contains(fields, name) {
				t.Errorf("%s.%s: in the CRD schema but not in the Go type", path, name)
			}
		}
		sort.Strings(required)
		got := append([]string(nil), s.Required...)
		sort.Strings(got)
		if path == "spec" {
			// Every spec field is optional; the Go type says so with omitempty.
			required = nil
		}
		if diff := cmp.Diff(required, got); diff != "" {
			t.Errorf("%s: required fields (-Go non-omitempty +schema):\n%s", path, diff)
		}
	default:
		t.Fatalf("%s: Go kind %s; extend this test", path, typ.Kind())
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestDeputyAppProjectSchemaValidatesObjects(t *testing.T) {
	crd := crdsByName(t)["appprojects.deputy.dev"]
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
		t.Fatal(err)
	}
	validator, _, err := schemavalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		object  string
		wantErr []string
	}{
		{
			name: "a project using every field is valid",
			object: `
apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: argocd}
spec:
  description: guestbook team
  sourceRepos: ["https://github.com/argoproj/argocd-example-apps"]
  destinations: [{server: "https://kubernetes.default.svc", namespace: guestbook, name: in-cluster}]
  destinationServiceAccounts:
  - {server: "https://kubernetes.default.svc", namespace: guestbook, defaultServiceAccount: guestbook-deployer}
  clusterResourceWhitelist: [{group: "", kind: Namespace}]
  clusterResourceBlacklist: [{group: rbac.authorization.k8s.io, kind: ClusterRole}]
  namespaceResourceWhitelist: [{group: apps, kind: Deployment}]
  namespaceResourceBlacklist: [{group: "", kind: ResourceQuota}]
  roles: [{name: ci, description: CI, policies: ["p, proj:guestbook:ci, applications, sync, guestbook/*, allow"], groups: [ci]}]
  sourceNamespaces: [argocd]
`,
		},
		{
			name: "a destinationServiceAccount without defaultServiceAccount is rejected",
			object: `
apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: p}
spec:
  destinationServiceAccounts: [{server: "*"}]
`,
			wantErr: []string{"defaultServiceAccount"},
		},
		{
			name: "a group kind without group is rejected (write group: \"\" for the core group, as in Argo CD)",
			object: `
apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: p}
spec:
  clusterResourceWhitelist: [{kind: Namespace}]
`,
			wantErr: []string{"clusterResourceWhitelist", "group"},
		},
		{
			name:    "a project without spec is rejected",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata: {name: p}\n",
			wantErr: []string{"spec"},
		},
		{
			name: "sourceRepos must be a list",
			object: `
apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: p}
spec: {sourceRepos: "*"}
`,
			wantErr: []string{"sourceRepos"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tt.object), &obj); err != nil {
				t.Fatal(err)
			}
			errs := schemavalidation.ValidateCustomResource(nil, obj, validator)
			if tt.wantErr == nil {
				if len(errs) > 0 {
					t.Errorf("valid object rejected: %v", errs.ToAggregate())
				}
				// And it decodes into the Go type without loss.
				var p policyv1alpha1.AppProject
				if err := yaml.UnmarshalStrict([]byte(tt.object), &p); err != nil {
					t.Errorf("object does not decode strictly into policy/v1alpha1.AppProject: %v", err)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("object accepted, want an error mentioning %q", tt.wantErr)
			}
			msg := errs.ToAggregate().Error()
			for _, s := range tt.wantErr {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
		})
	}
}
