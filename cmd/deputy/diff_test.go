package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

const (
	webDiff = `--- live/apps/v1/Deployment/guestbook/web
+++ target/apps/v1/Deployment/guestbook/web
@@ -6,3 +6,3 @@
 spec:
-  replicas: 1
+  replicas: 2
   selector:
`
	configDiff = `--- live/v1/ConfigMap/guestbook/config
+++ target/v1/ConfigMap/guestbook/config
@@ -0,0 +1,2 @@
+data:
+  color: blue
`
	oldDiff = `--- live/v1/ConfigMap/guestbook/old
+++ target/v1/ConfigMap/guestbook/old
@@ -1,2 +0,0 @@
-data:
-  color: red
`
)

// cliDiffer answers guestbook/guestbook with one resource of each action
// but error, guestbook/flaky with nothing to change, and guestbook/broken
// with a resource that could not be compared; it records the requests.
type cliDiffer struct {
	mu   sync.Mutex
	reqs []syncer.DiffRequest
}

func (d *cliDiffer) Diff(_ context.Context, req syncer.DiffRequest) (*v1alpha1.ApplicationDiff, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	d.mu.Unlock()
	out := &v1alpha1.ApplicationDiff{Namespace: req.Application.Namespace, Name: req.Application.Name,
		Revisions: []string{"0123abc"}, Identity: "system:serviceaccount:guestbook:guestbook-deployer"}
	if req.Application.Name == "guestbook" {
		out.Warnings = []string{"system:serviceaccount:guestbook:guestbook-deployer may not list secrets in guestbook: the Secrets to prune there are unknown"}
	}
	svc := v1alpha1.ResourceDiff{Version: "v1", Kind: "Service", Namespace: "guestbook", Name: "web", Action: v1alpha1.DiffActionUnchanged}
	web := v1alpha1.ResourceDiff{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Action: v1alpha1.DiffActionUpdate, Diff: webDiff}
	switch req.Application.Name {
	case "flaky":
		out.Resources = []v1alpha1.ResourceDiff{svc}
	case "broken":
		out.Resources = []v1alpha1.ResourceDiff{web, {Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "worker",
			Action: v1alpha1.DiffActionError, Message: `deployments.apps "worker" is forbidden: User "system:serviceaccount:guestbook:guestbook-deployer" cannot patch resource "deployments"`}}
	default:
		out.Resources = []v1alpha1.ResourceDiff{
			{Version: "v1", Kind: "Namespace", Name: "guestbook", Action: v1alpha1.DiffActionUnchanged},
			{Version: "v1", Kind: "ConfigMap", Namespace: "guestbook", Name: "config", Action: v1alpha1.DiffActionCreate, Diff: configDiff},
			web, svc,
			{Version: "v1", Kind: "ConfigMap", Namespace: "guestbook", Name: "old", Action: v1alpha1.DiffActionPrune, Diff: oldDiff,
				Message: "tracked by this Application (deputy.dev/tracking-id) but no longer rendered: a sync with prune deletes it"},
		}
	}
	return out, nil
}

func (d *cliDiffer) requests() []syncer.DiffRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]syncer.DiffRequest(nil), d.reqs...)
}

func TestDiffPrintsEveryChangeAndExits1(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "diff", "guestbook/guestbook", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	if want := "Warning: system:serviceaccount:guestbook:guestbook-deployer may not list secrets in guestbook: the Secrets to prune there are unknown\n"; errOut != want {
		t.Errorf("stderr %q, want the warning %q", errOut, want)
	}
	want := "===== v1/ConfigMap guestbook/config (create)\n" + configDiff +
		"===== apps/Deployment guestbook/web (update)\n" + webDiff +
		"===== v1/ConfigMap guestbook/old (prune: tracked by this Application, no longer in Git)\n" + oldDiff +
		"1 to update, 1 to create, 1 to prune, 2 unchanged (revision 0123abc, as system:serviceaccount:guestbook:guestbook-deployer)\n"
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("output (-want +got):\n%s", d)
	}
}

func TestDiffExitCodes(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	token := writeToken(t, syncAliceToken)
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  []string
		err  string
	}{
		{"nothing to change is 0", []string{"guestbook/flaky"}, 0, []string{"0 to update, 0 to create, 0 to prune, 1 unchanged"}, ""},
		{"a resource that could not be compared is 2, listed with the changes", []string{"guestbook/broken"}, 2, []string{
			"===== apps/Deployment guestbook/web (update)\n",
			`===== apps/Deployment guestbook/worker (error: deployments.apps "worker" is forbidden: User "system:serviceaccount:guestbook:guestbook-deployer" cannot patch resource "deployments")` + "\n",
			"1 to update, 0 to create, 0 to prune, 0 unchanged, 1 could not be compared"}, ""},
		{"-o json has the same exit codes", []string{"guestbook/broken", "-o", "json"}, 2, []string{`"kind": "ApplicationDiff"`, `"action": "error"`}, ""},
		{"an unknown Application is 2", []string{"guestbook/nope"}, 2, nil, `error: applications.deputy.dev "nope" not found`},
		{"a bad reference is 2", []string{"guestbook"}, 2, nil, "error: name the Application as NAMESPACE/NAME"},
		{"a bad output is 2", []string{"guestbook/guestbook", "-o", "yaml"}, 2, nil, `error: --output "yaml": the only format is json`},
		{"an unknown flag is 2", []string{"guestbook/guestbook", "--prune"}, 2, nil, "error: unknown flag: --prune"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"diff", "--server", s.url, "--cacert", s.caFile, "--token-file", token}, tc.args...)
			code, out, errOut := runCLI(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.out {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if !strings.Contains(errOut, tc.err) || (tc.err == "") != (errOut == "") {
				t.Errorf("stderr %q, want %q", errOut, tc.err)
			}
		})
	}
}

func TestDiffForbiddenNamesTheGrant(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, _, errOut := runCLI(t, "diff", "guestbook/guestbook", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncBobToken))
	if code != 2 || !strings.Contains(errOut, `User "bob" cannot get resource "applications/diff"`) ||
		!strings.Contains(errOut, "grant verb get on applications/diff, group deputy.dev") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}

func TestDiffSendsTheRevisions(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	t.Setenv(tokenEnv, syncAliceToken)
	if code, out, errOut := runCLI(t, "diff", "guestbook/guestbook", "--revision", "v1.2.3", "--server", s.url, "--cacert", s.caFile); code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// Several --revision are revisions, one per source: guestbook has
	// spec.source, so deputy refuses them, naming the fix.
	code, _, errOut := runCLI(t, "diff", "guestbook/guestbook", "--revision", "", "--revision", "v2", "--server", s.url, "--cacert", s.caFile)
	if code != 2 || !strings.Contains(errOut, "revisions is for an Application with spec.sources") || !strings.Contains(errOut, "give --revision once)") {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
	reqs := s.differ.requests()
	if len(reqs) != 1 || reqs[0].Sync.Revision != "v1.2.3" || len(reqs[0].Sync.Revisions) != 0 {
		t.Errorf("requests %+v", reqs)
	}
}

func TestDiffJSONIsTheApplicationDiff(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "diff", "guestbook/guestbook", "-o", "json", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var d v1alpha1.ApplicationDiff
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Kind != v1alpha1.KindApplicationDiff || d.APIVersion != v1alpha1.SchemeGroupVersion.String() || len(d.Resources) != 5 || d.Resources[4].Diff != oldDiff {
		t.Errorf("diff %+v", d)
	}
}

func TestExplainRevisionsForSpecSources(t *testing.T) {
	for _, msg := range []string{
		`revision names one revision, but the Application has 2 sources (spec.sources): send revisions, one per source in order ("" keeps a source's targetRevision), or no revision`,
		"revisions has 1 revisions, but the Application has 2 sources (spec.sources): send one per source in order",
	} {
		err := explainRevisions(&apiclient.StatusError{Status: metav1.Status{Code: 422, Message: msg}})
		if !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "give --revision once per source, in order") {
			t.Errorf("%s", err)
		}
	}
	other := &apiclient.StatusError{Status: metav1.Status{Code: 422, Message: `kustomize build failed`}}
	if err := explainRevisions(other); err != other {
		t.Errorf("another 422 changed: %v", err)
	}
}
