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
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"sigs.k8s.io/yaml"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

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
	if diff := cmp.Diff([]string{DeputyApplicationCRDFile, DeputyAppProjectCRDFile}, names); diff != "" {
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
	// Every AppProject spec field is optional; the Go type says so with
	// omitempty.
	compareSchema(t, "spec", reflect.TypeFor[policyv1alpha1.AppProjectSpec](), spec)
}

// TestDeputyApplicationSchemaMatchesGoType does the same for the Application:
// spec, operation and status, field for field.
func TestDeputyApplicationSchemaMatchesGoType(t *testing.T) {
	crd := crdsByName(t)["applications.deputy.dev"]
	if crd == nil {
		t.Fatal("no CRD applications.deputy.dev")
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	typ := reflect.TypeFor[policyv1alpha1.Application]()
	var fields []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "metadata" {
			continue // TypeMeta (inline) and ObjectMeta are Kubernetes' own
		}
		fields = append(fields, name)
		prop, ok := root.Properties[name]
		if !ok {
			t.Errorf("%s: in the Go type but not in the CRD schema", name)
			continue
		}
		compareSchema(t, name, f.Type, prop)
	}
	if diff := cmp.Diff([]string{"spec", "operation", "status"}, fields); diff != "" {
		t.Errorf("top-level fields (-want +got):\n%s", diff)
	}
	for name := range root.Properties {
		if !contains(append(fields, "apiVersion", "kind", "metadata"), name) {
			t.Errorf("%s: in the CRD schema but not in the Go type", name)
		}
	}
	if diff := cmp.Diff([]string{"spec"}, root.Required); diff != "" {
		t.Errorf("required top-level fields (-want +got):\n%s", diff)
	}
}

var (
	metav1TimeType   = reflect.TypeFor[metav1.Time]()
	rawExtensionType = reflect.TypeFor[runtime.RawExtension]()
)

func compareSchema(t *testing.T, path string, typ reflect.Type, s apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if s.Description == "" {
		t.Errorf("%s: no description", path)
	}
	if typ == metav1TimeType {
		if s.Type != "string" || s.Format != "date-time" {
			t.Errorf("%s: schema type %q format %q, want a date-time string (metav1.Time)", path, s.Type, s.Format)
		}
		return
	}
	if typ == rawExtensionType {
		if s.Type != "object" || s.XPreserveUnknownFields == nil || !*s.XPreserveUnknownFields {
			t.Errorf("%s: schema type %q, want an object with x-kubernetes-preserve-unknown-fields (runtime.RawExtension)", path, s.Type)
		}
		return
	}
	switch typ.Kind() {
	case reflect.Pointer:
		compareSchema(t, path, typ.Elem(), s)
	case reflect.Bool:
		if s.Type != "boolean" {
			t.Errorf("%s: schema type %q, want boolean", path, s.Type)
		}
	case reflect.Int64:
		if s.Type != "integer" || s.Format != "int64" {
			t.Errorf("%s: schema type %q format %q, want integer int64", path, s.Type, s.Format)
		}
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
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
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

func TestDeputyApplicationCRDNamesAndStatusSubresource(t *testing.T) {
	crd := crdsByName(t)["applications.deputy.dev"]
	if crd == nil {
		t.Fatal("no CRD applications.deputy.dev")
	}
	if crd.Spec.Group != policyv1alpha1.Group || crd.Spec.Names.Kind != policyv1alpha1.KindApplication ||
		crd.Spec.Names.Plural != "applications" || crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("names %+v, group %q, scope %q", crd.Spec.Names, crd.Spec.Group, crd.Spec.Scope)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != policyv1alpha1.Version || !crd.Spec.Versions[0].Served || !crd.Spec.Versions[0].Storage {
		t.Fatalf("versions %+v, want v1alpha1 served and stored", crd.Spec.Versions)
	}
	if sr := crd.Spec.Versions[0].Subresources; sr == nil || sr.Status == nil {
		t.Error("no status subresource: deputy writes status through it, users write spec")
	}
}

// applicationValidator validates objects as kube-apiserver would against the
// Application CRD: the OpenAPI schema, then its CEL rules.
func applicationValidator(t *testing.T) func(obj map[string]any) []string {
	t.Helper()
	crd := crdsByName(t)["applications.deputy.dev"]
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, internal, nil); err != nil {
		t.Fatal(err)
	}
	validator, _, err := schemavalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatal(err)
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		t.Fatal(err)
	}
	celValidator := cel.NewValidator(structural, true, celconfig.PerCallLimit)
	return func(obj map[string]any) []string {
		var msgs []string
		for _, e := range schemavalidation.ValidateCustomResource(nil, obj, validator) {
			msgs = append(msgs, e.Error())
		}
		errs, _ := celValidator.Validate(t.Context(), nil, structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		return msgs
	}
}

func TestDeputyApplicationSchemaValidatesObjects(t *testing.T) {
	validate := applicationValidator(t)
	tests := []struct {
		name    string
		object  string
		wantErr []string
	}{
		{
			name: "an Application using every field is valid",
			object: `
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: guestbook}
spec:
  project: guestbook
  source:
    repoURL: "https://github.com/argoproj/argocd-example-apps"
    path: guestbook
    targetRevision: HEAD
    helm:
      valueFiles: [values-prod.yaml]
      ignoreMissingValueFiles: true
      values: "replicas: 2"
      valuesObject: {image: {tag: v2}}
      parameters: [{name: image.tag, value: v3, forceString: true}]
      fileParameters: [{name: config, path: files/config.txt}]
      releaseName: guestbook
      namespace: guestbook
      skipCrds: true
      skipSchemaValidation: true
      kubeVersion: "1.37.0"
      apiVersions: [monitoring.coreos.com/v1]
      passCredentials: false
  destination: {server: "https://kubernetes.default.svc", namespace: guestbook}
  syncPolicy:
    automated: {prune: true, selfHeal: true}
    syncOptions: [CreateNamespace=true]
operation:
  sync: {revision: main, prune: true, dryRun: false}
  initiatedBy: {username: alice}
status:
  sync: {status: Synced, revision: 0123abc}
  operationState:
    operation: {sync: {revision: main}, initiatedBy: {username: alice}}
    phase: Succeeded
    message: successfully synced
    identity: system:serviceaccount:guestbook:guestbook-deployer
    startedAt: "2026-01-02T03:04:05Z"
    finishedAt: "2026-01-02T03:04:09Z"
    syncResult:
      revision: 0123abc
      resources:
      - {group: apps, version: v1, kind: Deployment, namespace: guestbook, name: web, status: Synced, message: created}
`,
		},
		{
			name:    "a destination by name is valid",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, source: {repoURL: r}, destination: {name: in-cluster}}\n",
			wantErr: nil,
		},
		{
			name:    "an Application without spec is rejected",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\n",
			wantErr: []string{"spec: Required value"},
		},
		{
			name:    "project, source and destination are required",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {}\n",
			wantErr: []string{"spec.project: Required value", "spec.destination: Required value", "set spec.source (one source) or spec.sources (several)"},
		},
		{
			name:    "an empty sources list is no source",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, sources: [], destination: {name: y}}\n",
			wantErr: []string{"set spec.source (one source) or spec.sources (several)"},
		},
		{
			name:    "spec.sources with a ref source is accepted",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, sources: [{repoURL: r, path: web, helm: {valueFiles: [$values/v.yaml]}}, {repoURL: s, ref: values}], destination: {name: c}}\nstatus: {sync: {status: Synced, revisions: [a, b]}}\n",
			wantErr: nil,
		},
		{
			name:    "a source of spec.sources needs a repoURL",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, sources: [{path: web}], destination: {name: y}}\n",
			wantErr: []string{"spec.sources[0].repoURL: Required value"},
		},
		{
			name:    "an empty project or repoURL is rejected",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: '', source: {repoURL: ''}, destination: {server: https://x}}\n",
			wantErr: []string{"spec.project: Invalid value", "spec.source.repoURL: Invalid value"},
		},
		{
			name:    "a destination without server and name is rejected by the CEL rule",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, source: {repoURL: r}, destination: {namespace: ns}}\n",
			wantErr: []string{"spec.destination: Invalid value", "exactly one"},
		},
		{
			name:    "a destination with server and name is rejected by the CEL rule",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, source: {repoURL: r}, destination: {server: https://x, name: y}}\n",
			wantErr: []string{"spec.destination: Invalid value", "exactly one"},
		},
		{
			name:    "an unknown phase is rejected",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, source: {repoURL: r}, destination: {name: y}}\nstatus: {operationState: {operation: {}, phase: Done, startedAt: '2026-01-02T03:04:05Z'}}\n",
			wantErr: []string{"status.operationState.phase: Unsupported value"},
		},
		{
			name:    "prune is a boolean",
			object:  "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a}\nspec: {project: p, source: {repoURL: r}, destination: {name: y}}\noperation: {sync: {prune: 'yes'}}\n",
			wantErr: []string{"operation.sync.prune: Invalid value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tt.object), &obj); err != nil {
				t.Fatal(err)
			}
			msgs := validate(obj)
			if tt.wantErr == nil {
				if len(msgs) > 0 {
					t.Errorf("valid object rejected: %v", msgs)
				}
				var a policyv1alpha1.Application
				if err := yaml.UnmarshalStrict([]byte(tt.object), &a); err != nil {
					t.Errorf("object does not decode strictly into policy/v1alpha1.Application: %v", err)
				}
				return
			}
			joined := strings.Join(msgs, "\n")
			for _, s := range tt.wantErr {
				if !strings.Contains(joined, s) {
					t.Errorf("errors do not mention %q:\n%s", s, joined)
				}
			}
		})
	}
}
