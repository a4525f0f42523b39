package e2e

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// A Helm chart in Git syncs as the project's derived ServiceAccount, with
// preflight and prune, as `helm template` renders it with Argo CD's
// spec.source.helm: a values file from elsewhere in the repository, the
// release named after the Application, .Capabilities.KubeVersion read from
// the real kube-apiserver as the ServiceAccount. A values change that drops
// an object prunes it.
func TestSyncHelmChartFromGit(t *testing.T) {
	const ns, sa = "sync-helm", "helm-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	role(t, ns, "e2e-helm", ns, sa, rule("", []string{"configmaps"}, "get", "list", "create", "patch", "delete"))
	project := syncProject(t, "sync-helm", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	repo := newGitRepo(t)
	repo.write("charts/web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
	repo.write("charts/web/values.yaml", "greeting: default\nextra: false\n")
	repo.write("charts/web/templates/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-config}\n"+
		"data:\n  greeting: {{ .Values.greeting | quote }}\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n"+
		"  namespace: {{ .Release.Namespace | quote }}\n  policyV1: {{ .Capabilities.APIVersions.Has \"policy/v1/PodDisruptionBudget\" | quote }}\n")
	repo.write("charts/web/templates/extra.yaml", "{{ if .Values.extra }}apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-extra}\n{{ end }}")
	repo.write("envs/prod.yaml", "greeting: from-prod\nextra: true\n")
	first := repo.commit("chart")
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	app := application("helm-web", "sync-helm", repo.dir, "charts/web", ns)
	app.Spec.Source.Helm = &v1alpha1.HelmSource{ValueFiles: []string{"/envs/prod.yaml"}}
	cs := admin(t)
	version, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
	res := resultsByName(st)
	if st.Phase != v1alpha1.OperationSucceeded || st.Identity != saUser || len(res) != 2 ||
		res["ConfigMap/helm-web-config"] == nil || res["ConfigMap/helm-web-extra"] == nil || st.SyncResult.Revision != first.String() {
		t.Fatalf("first sync: %s", describe(st))
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "helm-web-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"greeting": "from-prod", "kube": version.GitVersion, "namespace": ns, "policyV1": "true"}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("data.%s = %q, want %q (the values file, the destination's version, the release namespace)", k, cm.Data[k], v)
		}
	}
	for _, ev := range auditedWrites(t, started, 2, func(ev framework.AuditEvent) bool {
		return ev.Verb == "patch" && ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Resource == "configmaps"
	}) {
		if ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != saUser {
			t.Errorf("apply of %s not as the ServiceAccount: %+v", ev.ObjectRef.Name, ev)
		}
	}

	t.Run("a values change that drops an object prunes it", func(t *testing.T) {
		repo.write("envs/prod.yaml", "greeting: changed\nextra: false\n")
		second := repo.commit("no extra")
		app.Status.OperationState = st
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
		res := resultsByName(st)
		if st.Phase != v1alpha1.OperationSucceeded || res["ConfigMap/helm-web-extra"] == nil || res["ConfigMap/helm-web-extra"].Status != v1alpha1.ResultCodePruned ||
			st.SyncResult.Revision != second.String() {
			t.Fatalf("second sync: %s", describe(st))
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "helm-web-extra", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("helm-web-extra after the prune: %v", err)
		}
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "helm-web-config", metav1.GetOptions{})
		if err != nil || cm.Data["greeting"] != "changed" {
			t.Errorf("helm-web-config after the change: %v %v", cm.Data, err)
		}
	})
	t.Run("a missing permission is named by the preflight before anything is applied", func(t *testing.T) {
		repo.write("charts/web/templates/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: {{ .Release.Name }}-secret}\nstringData: {k: v}\n")
		repo.commit("a Secret the ServiceAccount may not create")
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "preflight failed: "+saUser+" lacks 3 permissions this sync needs; nothing was changed") ||
			!strings.Contains(st.Message, "create secrets in namespace "+ns+", for Secret "+ns+"/helm-web-secret") {
			t.Fatalf("%s", describe(st))
		}
		if _, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "helm-web-secret", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Secret exists: %v", err)
		}
	})
}
