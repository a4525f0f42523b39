package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// Issue 14: a tenant's Helm chart in Git and its spec.source.helm are
// hostile input. The attacker (team B) tries to make the render read files
// outside its repository (values files, file parameters, symbolic links,
// file:// dependencies, deputy's clone cache), read the cluster through
// `lookup`, place objects in team A's namespace through a template or a hook,
// and exhaust deputy with a chart that renders 100k objects. Every attempt
// ends in Error naming what was refused, applies nothing, and leaves no trace
// of team A's data or of deputy's host files in team B's namespace.
func TestAttack20HelmChartFromGit(t *testing.T) {
	s := attackEnv(t)
	r := s.startReplica(t, nil)
	s.ensureVictimSynced(t)
	s.waitGateAllows(t, "system:serviceaccount:"+nsB+":deployer", nsB)

	// report prints what the chart could read into a ConfigMap: if any read
	// escaped, the ConfigMap would carry the host's or team A's data.
	report := func(name, expr string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {read: {{ %s | quote }}}\n", name, expr)
	}
	chart := func(dir, name string) framework.GitFile {
		return framework.GitFile{Path: dir + "/Chart.yaml", Content: "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n"}
	}
	victimMirror := computeTodayCacheDir(s.cacheDir, s.git.RepoURL(victimRepo))
	var many strings.Builder
	many.WriteString("{{ range until 100000 }}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a20-many-{{ . }}}\n{{ end }}")
	files := []framework.GitFile{
		chart("values", "values"),
		{Path: "values/templates/cm.yaml", Content: report("a20-values", ".Values.stolen | default \"\"")},
		chart("links", "links"),
		{Path: "links/templates/cm.yaml", Content: report("a20-links", `.Files.Get "passwd.yaml"`)},
		{Path: "links/passwd.yaml", Link: "/etc/passwd"},
		{Path: "links/values.yaml", Link: "../../../../../../../../etc/passwd"},
		chart("linked-values", "linked"),
		{Path: "linked-values/templates/cm.yaml", Content: report("a20-linked", ".Values | toYaml")},
		{Path: "linked-values/values.yaml", Link: "../../../../../../../../proc/self/environ"},
		{Path: "dep-outside/Chart.yaml", Content: "apiVersion: v2\nname: dep\nversion: 0.1.0\ndependencies:\n- {name: victim, version: 0.1.0, repository: \"file://../../../../../../../.." + victimMirror + "\"}\n"},
		{Path: "dep-abs/Chart.yaml", Content: "apiVersion: v2\nname: dep\nversion: 0.1.0\ndependencies:\n- {name: victim, version: 0.1.0, repository: \"file://" + victimMirror + "\"}\n"},
		chart("lookup", "lookup"),
		{Path: "lookup/templates/cm.yaml", Content: report("a20-lookup", `(lookup "v1" "Secret" "`+nsA+`" "`+victimSecretName+`").data | toJson`)},
		chart("cross-ns", "crossns"),
		{Path: "cross-ns/templates/cm.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a20-cross, namespace: " + nsA + "}\ndata: {k: v}\n"},
		chart("cross-hook", "crosshook"),
		{Path: "cross-hook/templates/job.yaml", Content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a20-hook\n  namespace: " + nsA + "\n  annotations: {helm.sh/hook: pre-install}\ndata: {k: v}\n"},
		chart("many", "many"),
		{Path: "many/templates/cm.yaml", Content: many.String()},
	}
	const repo = "/team-b/helm-attack.git"
	if _, err := s.git.Commit(repo, "hostile charts", files); err != nil {
		t.Fatal(err)
	}
	url := s.git.RepoURL(repo)
	cases := []struct {
		name, path string
		helm       map[string]any
		want       []string
	}{
		{"a values file that climbs out of the repository", "values",
			map[string]any{"valueFiles": []any{"../../../../../../../../etc/passwd"}}, []string{"spec.source.helm.valueFiles[0]"}},
		{"a values file naming deputy's clone cache", "values",
			map[string]any{"valueFiles": []any{"../../../../../../../.." + victimMirror + "/config"}}, []string{"spec.source.helm.valueFiles[0]"}},
		{"an absolute values file is the repository's, not the host's", "values",
			map[string]any{"valueFiles": []any{"/etc/passwd"}}, []string{"spec.source.helm.valueFiles[0]", "does not exist in the repository"}},
		{"a values file URL", "values",
			map[string]any{"valueFiles": []any{s.evil.URL + "/values.yaml"}}, []string{"spec.source.helm.valueFiles[0]"}},
		{"a file parameter reading the process environment", "values",
			map[string]any{"fileParameters": []any{map[string]any{"name": "stolen", "path": "../../../../../../../../proc/self/environ"}}}, []string{"spec.source.helm.fileParameters[0]"}},
		{"a symbolic link to /etc/passwd read by .Files.Get, and values.yaml linked out", "links", nil, []string{"symbolic link"}},
		{"values.yaml linked to /proc/self/environ", "linked-values", nil, []string{"symbolic link"}},
		{"a file:// dependency climbing to team A's mirror", "dep-outside", nil, []string{"Chart.yaml dependency victim"}},
		{"a file:// dependency with an absolute path", "dep-abs", nil, []string{"Chart.yaml dependency victim", "outside the repository"}},
		{"a template that writes into team A's namespace", "cross-ns", nil, []string{nsA}},
		{"a hook that writes into team A's namespace", "cross-hook", nil, []string{nsA}},
		{"a chart that renders 100k objects", "many", nil, []string{"sync.limits.maxObjects"}},
	}
	apps := make([]tenantApp, len(cases))
	for i, c := range cases {
		apps[i] = attackerApp(fmt.Sprintf("a20-%d", i), url, c.path)
		apps[i].helm = c.helm
		s.requestSync(t, apps[i])
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := waitOperationDone(t, nsB, apps[i].name, 3*time.Minute)
			wantRefused(t, st, c.want...)
		})
	}

	t.Run("lookup returns nothing: the chart renders, without team A's Secret", func(t *testing.T) {
		app := attackerApp("a20-lookup", url, "lookup")
		st := s.syncAndWait(t, app)
		if st.Phase != v1alpha1.OperationSucceeded {
			t.Fatalf("a chart calling lookup renders as helm template does (lookup empty): %s", describe(st))
		}
		cm, err := admin(t).CoreV1().ConfigMaps(nsB).Get(t.Context(), "a20-lookup", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data["read"]; got != "{}" && got != "null" {
			t.Errorf("lookup returned %q, want nothing", got)
		}
	})
	t.Run("nothing of team A's or of deputy's host reached team B's namespace", func(t *testing.T) {
		s.assertNoVictimData(t, nsB)
		cms, err := admin(t).CoreV1().ConfigMaps(nsB).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			for k, v := range cm.Data {
				if strings.Contains(v, "root:") || strings.Contains(v, "PATH=") {
					t.Errorf("ConfigMap %s key %s holds a host file: %.80q", cm.Name, k, v)
				}
			}
		}
		if _, err := admin(t).CoreV1().ConfigMaps(nsA).Get(t.Context(), "a20-cross", metav1.GetOptions{}); err == nil {
			t.Error("the template's ConfigMap is in team A's namespace")
		}
		if _, err := admin(t).CoreV1().ConfigMaps(nsA).Get(t.Context(), "a20-hook", metav1.GetOptions{}); err == nil {
			t.Error("the hook's ConfigMap is in team A's namespace")
		}
	})
	t.Run("deputy survives and keeps serving", func(t *testing.T) {
		if r.Exited() {
			t.Fatalf("deputy exited:\n%s", tail(r.Logs(), 40))
		}
		checkHealthy(t, r.Deputy)
	})
}
