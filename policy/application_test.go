package policy_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

const guestbookApplication = `apiVersion: deputy.dev/v1alpha1
kind: Application
metadata:
  name: guestbook
  namespace: guestbook
spec:
  project: guestbook
  source:
    repoURL: https://github.com/argoproj/argocd-example-apps
    path: guestbook
    targetRevision: HEAD
  destination:
    server: https://kubernetes.default.svc
    namespace: guestbook
  syncPolicy:
    syncOptions: [CreateNamespace=true]
`

const guestbookProject = `apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: guestbook}
spec:
  sourceRepos: ["*"]
  destinations: [{server: https://kubernetes.default.svc, namespace: guestbook}]
  destinationServiceAccounts: [{server: https://kubernetes.default.svc, namespace: guestbook, defaultServiceAccount: guestbook-deployer}]
`

func TestDecodeApplications(t *testing.T) {
	objs, err := loadDecode(t, "apps.yaml", guestbookApplication+"---\n"+guestbookProject)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(objs.Applications) != 1 {
		t.Fatalf("Applications = %d, want 1", len(objs.Applications))
	}
	got := objs.Applications[0]
	want := v1alpha1.ApplicationSpec{
		Project: "guestbook",
		Source: v1alpha1.ApplicationSource{
			RepoURL: "https://github.com/argoproj/argocd-example-apps", Path: "guestbook", TargetRevision: "HEAD",
		},
		Destination: v1alpha1.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "guestbook"},
		SyncPolicy:  &v1alpha1.SyncPolicy{SyncOptions: []string{"CreateNamespace=true"}},
	}
	if diff := cmp.Diff(want, got.Object.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if got.Source != "apps.yaml document 1" {
		t.Errorf("source %q, want apps.yaml document 1", got.Source)
	}

	snap, err := policy.Build(objs, true)
	if err != nil {
		t.Fatal(err)
	}
	if a := snap.Application("guestbook", "guestbook"); a == nil || a.Object != got.Object {
		t.Errorf("Snapshot.Application(guestbook, guestbook) = %v, want the decoded Application", a)
	}
	if a := snap.Application("guestbook", "other"); a != nil {
		t.Errorf("an unknown Application was found: %v", a)
	}
	if p := snap.DeputyAppProject("guestbook", "guestbook"); p == nil || p.Name != "guestbook" {
		t.Errorf("DeputyAppProject(guestbook, guestbook) = %v, want the project", p)
	}
	var nilSnap *policy.Snapshot
	if nilSnap.Application("a", "b") != nil || nilSnap.DeputyAppProject("a", "b") != nil {
		t.Error("a nil snapshot must find nothing")
	}
}

func TestDeputyAppProjectIgnoresArgoCDProjects(t *testing.T) {
	objs, err := loadDecode(t, "p.yaml", "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: p, namespace: ns}\nspec: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Build(objs, true)
	if err != nil {
		t.Fatal(err)
	}
	if p := snap.DeputyAppProject("ns", "p"); p != nil {
		t.Errorf("an argoproj.io AppProject governs deputy.dev Applications: %v", p)
	}
}

func TestDecodeApplicationErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{
			name: "an Application without project, repository and destination names all three",
			content: `apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: app, namespace: ns}
spec:
  source: {path: x}
  destination: {namespace: ns}
`,
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": [` +
				`spec.project: Required value: name the AppProject (deputy.dev, in the Application's namespace) that governs this Application, ` +
				`spec.source.repoURL: Required value: set the Git repository to sync from (https://..., file://... or a local path), ` +
				`spec.destination.server: Required value: set destination.server (the cluster's API server URL, e.g. https://kubernetes.default.svc) or destination.name (a cluster registered in sync.clusters)]`,
		},
		{
			name:    "an Application needs a namespace",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app}\nspec: {project: p, source: {repoURL: r}, destination: {name: in-cluster}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "app": metadata.namespace: Required value: a namespaced object needs metadata.namespace`,
		},
		{
			name:    "a destination with both server and name is ambiguous",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, source: {repoURL: r}, destination: {server: https://a, name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": spec.destination.name: Invalid value: "b": set destination.server or destination.name, not both (as Argo CD requires)`,
		},
		{
			name:    "a path may not leave the repository",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, source: {repoURL: r, path: a/../../etc}, destination: {name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": spec.source.path: Invalid value: "a/../../etc": must stay inside the repository: remove the leading ..`,
		},
		{
			name:    "an absolute path is rejected",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, source: {repoURL: r, path: /etc}, destination: {name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": spec.source.path: Invalid value: "/etc": must be relative to the repository root (e.g. guestbook), not absolute`,
		},
		{
			name:    "an unknown field is rejected (strict decoding)",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, source: {repoURL: r, repoUrl: x}, destination: {name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": unknown field "spec.source.repoUrl" (fix or remove the field)`,
		},
		{
			name:    "spec.source and spec.sources together are refused, naming the fix",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, source: {repoURL: r}, sources: [{repoURL: r, path: a}], destination: {name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": spec.source: Forbidden: spec.source and spec.sources are both set: move spec.source into spec.sources (or remove it); Argo CD would silently ignore spec.source, deputy refuses`,
		},
		{
			name:    "a source of spec.sources is named by its index",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, sources: [{repoURL: r, path: a}, {repoURL: v, ref: 'my values'}], destination: {name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": spec.sources[1].ref: Invalid value: "my values": a ref may hold only letters, digits, '_' and '-' (Argo CD's rule): rename it, and the $REF/ value files that use it`,
		},
		{
			name:    "status is deputy's",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: ns}\nspec: {project: p, source: {repoURL: r}, destination: {name: b}}\nstatus: {sync: {status: Synced}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/app": status: Forbidden: status is written by deputy; remove it from the policy file`,
		},
		{
			name:    "an invalid name is rejected",
			content: "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: App_1, namespace: ns}\nspec: {project: p, source: {repoURL: r}, destination: {name: b}}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "ns/App_1": metadata.name: Invalid value: "App_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
		},
		{
			name:    "an Argo CD Application is pointed at deputy's group",
			content: "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: argocd}\nspec: {}\n",
			wantErr: `a.yaml: document 1 (line 1), Application "argocd/app": an argoproj.io Application is Argo CD's: deputy syncs deputy.dev/v1alpha1 Applications; change apiVersion to deputy.dev/v1alpha1`,
		},
		{
			name:    "the same Application twice is an error naming the first",
			content: guestbookApplication + "---\n" + guestbookApplication,
			wantErr: `a.yaml: document 2 (line 18), Application "guestbook/guestbook": duplicate object: already defined at a.yaml document 1 (each object may be defined once)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := loadDecode(t, "a.yaml", tc.content)
			if err == nil {
				t.Fatalf("Decode = %v, want error %q", objs.Applications, tc.wantErr)
			}
			if diff := cmp.Diff([]string{tc.wantErr}, loadCheckErrors(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateApplicationAcceptsADestinationByName(t *testing.T) {
	a := &v1alpha1.Application{}
	a.Name, a.Namespace = "app", "ns"
	a.Spec = v1alpha1.ApplicationSpec{Project: "p", Source: v1alpha1.ApplicationSource{RepoURL: "file:///repo", Path: "./deploy/"},
		Destination: v1alpha1.ApplicationDestination{Name: "in-cluster"}}
	if errs := policy.ValidateApplication(a); len(errs) > 0 {
		t.Errorf("valid Application rejected: %v", errs)
	}
	if errs := policy.ValidateApplication(nil); errs != nil {
		t.Errorf("nil Application: %v", errs)
	}
}

// spec.source.helm's fields are checked with the rest of the Application,
// each error naming its field.
func TestValidateApplicationChecksHelmFields(t *testing.T) {
	a := &v1alpha1.Application{}
	a.Name, a.Namespace = "app", "ns"
	a.Spec = v1alpha1.ApplicationSpec{Project: "p", Destination: v1alpha1.ApplicationDestination{Name: "in-cluster"},
		Source: v1alpha1.ApplicationSource{RepoURL: "file:///repo", Path: "chart", Helm: &v1alpha1.HelmSource{
			ValueFiles: []string{"values.yaml", "https://example.com/v.yaml"}, Parameters: []v1alpha1.HelmParameter{{Value: "1"}}, KubeVersion: "latest",
		}}}
	var got []string
	for _, e := range policy.ValidateApplication(a) {
		got = append(got, e.Field)
	}
	want := []string{"spec.source.helm.valueFiles[1]", "spec.source.helm.parameters[0].name", "spec.source.helm.kubeVersion"}
	if !slices.Equal(got, want) {
		t.Errorf("fields = %v, want %v", got, want)
	}
}

func TestDecodeMultiSourceApplication(t *testing.T) {
	objs, err := loadDecode(t, "a.yaml", `apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: web, namespace: guestbook}
spec:
  project: guestbook
  sources:
  - {repoURL: https://git.example.com/charts.git, path: web, helm: {valueFiles: [$values/web/prod.yaml]}}
  - {repoURL: https://git.example.com/values.git, targetRevision: main, ref: values}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
`)
	if err != nil {
		t.Fatal(err)
	}
	spec := objs.Applications[0].Object.Spec
	if !spec.HasMultipleSources() || spec.Sources[1].Ref != "values" || spec.Sources[0].Helm.ValueFiles[0] != "$values/web/prod.yaml" || spec.Source.RepoURL != "" {
		t.Errorf("spec = %+v", spec)
	}
}

func TestValidateApplicationChecksRetryAndHealthTimeout(t *testing.T) {
	a := &v1alpha1.Application{}
	a.Name, a.Namespace = "app", "ns"
	a.Spec = v1alpha1.ApplicationSpec{Project: "p", Destination: v1alpha1.ApplicationDestination{Name: "in-cluster"},
		Source:     v1alpha1.ApplicationSource{RepoURL: "file:///repo"},
		SyncPolicy: &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: 2, Backoff: &v1alpha1.Backoff{MaxDuration: "forever"}}, HealthTimeout: "10"}}
	var got []string
	for _, e := range policy.ValidateApplication(a) {
		got = append(got, e.Field)
	}
	want := []string{"spec.syncPolicy.retry.backoff.maxDuration", "spec.syncPolicy.healthTimeout"}
	if !slices.Equal(got, want) {
		t.Errorf("fields = %v, want %v", got, want)
	}
}
