package e2e

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// sourcesChart is a chart whose ConfigMap takes its name and data from the
// values, and renders a second ConfigMap only while values.extra is true.
var sourcesChart = map[string]string{
	"web/Chart.yaml":           "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"web/values.yaml":          "greeting: from-the-chart\nextra: false\n",
	"web/templates/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-settings}\ndata: {greeting: {{ .Values.greeting | quote }}}\n",
	"web/templates/extra.yaml": "{{ if .Values.extra }}apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-extra}\n{{ end }}",
}

// multiSourceApp is an Application whose chart is in charts and whose
// values are $values/web/values.yaml of values (a ref source).
func multiSourceApp(name, project, charts, values, ns string) *v1alpha1.Application {
	return &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: name}, Spec: v1alpha1.ApplicationSpec{
		Project: project,
		Sources: []v1alpha1.ApplicationSource{
			{RepoURL: charts, Path: "web", Helm: &v1alpha1.HelmSource{ValueFiles: []string{"$values/web/values.yaml"}}},
			{RepoURL: values, Ref: "values"},
		},
		Destination: v1alpha1.ApplicationDestination{Server: inCluster, Namespace: ns},
	}}
}

// Issue 14: a multi-source Application, the chart in one Git repository
// and its values in a second (ref + $values/...), synced on the real
// apiserver as the derived ServiceAccount with preflight and prune; a change
// in the values repository alone changes the objects on the next sync.
func TestSyncMultipleSourcesChartWithValuesFromASecondRepository(t *testing.T) {
	const ns, sa = "sync-sources", "sources-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	role(t, ns, "e2e-sources", ns, sa, rule("", []string{"configmaps"}, "get", "list", "create", "patch", "delete"))
	charts, values := newGitRepo(t), newGitRepo(t)
	for name, content := range sourcesChart {
		charts.write(name, content)
	}
	chartsSHA := charts.commit("chart").String()
	values.write("web/values.yaml", "greeting: hello from the values repository\nextra: true\n")
	firstValues := values.commit("values").String()
	project := syncProject(t, "sync-sources", v1alpha1.AppProjectSpec{
		SourceRepos:                []string{charts.dir, values.dir},
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	app := multiSourceApp("sources-demo", "sync-sources", charts.dir, values.dir, ns)
	cs := admin(t)

	first := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
	res := resultsByName(first)
	if first.Phase != v1alpha1.OperationSucceeded || first.Identity != saUser || len(res) != 2 ||
		res["ConfigMap/sources-demo-settings"] == nil || res["ConfigMap/sources-demo-extra"] == nil {
		t.Fatalf("first sync: %s", describe(first))
	}
	if r := first.SyncResult; r.Revision != "" || len(r.Revisions) != 2 || r.Revisions[0] != chartsSHA || r.Revisions[1] != firstValues {
		t.Errorf("syncResult revisions %q (revision %q), want [%s %s] and no single revision", r.Revisions, r.Revision, chartsSHA, firstValues)
	}
	if st, ok := v1alpha1.SyncStatusAfter(first); !ok || st.Status != v1alpha1.SyncStatusCodeSynced || len(st.Revisions) != 2 {
		t.Errorf("status after the sync: %+v", st)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "sources-demo-settings", metav1.GetOptions{})
	if err != nil || cm.Data["greeting"] != "hello from the values repository" || cm.Annotations[syncer.TrackingAnnotation] != "argocd/sources-demo" {
		t.Fatalf("live ConfigMap %+v, %v: want the values repository's greeting, tracked", cm, err)
	}

	// Only the values repository changes: a new greeting, no extra object.
	values.write("web/values.yaml", "greeting: changed in the values repository\nextra: false\n")
	secondValues := values.commit("new values").String()
	app.Status.OperationState = first
	second := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
	res = resultsByName(second)
	if second.Phase != v1alpha1.OperationSucceeded || second.Identity != saUser || res["ConfigMap/sources-demo-extra"] == nil ||
		res["ConfigMap/sources-demo-extra"].Status != v1alpha1.ResultCodePruned {
		t.Fatalf("second sync: %s", describe(second))
	}
	if r := second.SyncResult.Revisions; len(r) != 2 || r[0] != chartsSHA || r[1] != secondValues {
		t.Errorf("revisions %q, want [%s %s]", r, chartsSHA, secondValues)
	}
	if cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "sources-demo-settings", metav1.GetOptions{}); err != nil || cm.Data["greeting"] != "changed in the values repository" {
		t.Errorf("live ConfigMap after the values changed: %+v, %v", cm, err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "sources-demo-extra", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the object the new values no longer render was not pruned: %v", err)
	}

	t.Run("the controller's revision detection resolves every source", func(t *testing.T) {
		revs, err := engine.ResolveRevisions(t.Context(), app, project)
		if err != nil || len(revs) != 2 || revs[0] != chartsSHA || revs[1] != secondValues {
			t.Errorf("ResolveRevisions = %q, %v; want [%s %s]", revs, err, chartsSHA, secondValues)
		}
	})
}
