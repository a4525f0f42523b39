package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// Issue 11, items 14-16: identities, ownership and policy reload.

// Item 14. A project token's groups were the role's groups read at use
// time, only system: refused: a project admin set the role's groups to
// kubeadm:cluster-admins and an existing token became cluster-admin. A
// project token's identity derives only from the project's namespace, name
// and role: user deputy:project:NS/NAME:ROLE, group deputy:project:NS/NAME,
// whatever the role's groups say; such projects stay valid and their tokens
// keep authenticating.
func TestAttack14ProjectTokenGroups(t *testing.T) {
	s := attackEnv(t)
	const project = "attack-14"
	projectGroup := "deputy:project:" + deputyNamespace + "/" + project
	otherProjectGroup := "deputy:project:" + deputyNamespace + "/attack-14-other"
	// Groups that are cluster-admin in this cluster (as kubeadm binds its
	// admin group), and one that is another project's.
	s.applyT(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: attack-14-admin-groups}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "kubeadm:cluster-admins"}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "oidc:platform-admins"}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: %q}
`, otherProjectGroup))
	roles := func(ciGroups string) string {
		return fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  roles:
  - {name: ci, groups: [%[3]s]}
  - {name: admin-group, groups: ["kubeadm:cluster-admins"]}
  - {name: other-project, groups: [%[4]q]}
  - {name: oidc, groups: ["oidc:platform-admins"]}
  - {name: no-groups}
`, inCluster, nsB, ciGroups, otherProjectGroup)
	}
	s.gateProject(t, project, roles("attack-ci-bots"))

	dir := t.TempDir()
	keyFile, pubFile := filepath.Join(dir, "project-token.key"), filepath.Join(dir, "project-token.pub")
	if _, err := framework.CLI(deputy.Bin, "token", "keygen", "--private-key", keyFile, "--public-key", pubFile); err != nil {
		t.Fatal(err)
	}
	withGateConfig(t, func(cfg map[string]any) {
		cfg["authentication"] = map[string]any{"projectTokens": map[string]any{"signingKeyFile": keyFile}}
	})
	cfgFile := filepath.Join(work, "deputy-attack.yaml")
	token := func(t *testing.T, role string) string {
		out, err := deputyStdout(deputy.Bin, "token", "create", "--config", cfgFile, "--project", deputyNamespace+"/"+project, "--role", role, "--ttl", "1h", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Token string }
		if err := json.Unmarshal(out, &got); err != nil || got.Token == "" {
			t.Fatalf("deputy token create: %v\n%s", err, out)
		}
		return got.Token
	}
	// The token's identity is the project's, and it cannot grant itself
	// cluster-admin.
	check := func(t *testing.T, role, tok string) error {
		u, err := whoami(t, tok)
		if err != nil {
			return fmt.Errorf("the token no longer authenticates: %w", err)
		}
		if want := "deputy:project:" + deputyNamespace + "/" + project + ":" + role; u.Username != want {
			return fmt.Errorf("user %q, want %q", u.Username, want)
		}
		if !slices.Contains(u.Groups, projectGroup) {
			return fmt.Errorf("groups %v lack %q", u.Groups, projectGroup)
		}
		for _, g := range u.Groups {
			if g != projectGroup && g != "system:authenticated" {
				return fmt.Errorf("the token carries group %q (groups %v)", g, u.Groups)
			}
		}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "attack-14-escalated-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "attack-14-mallory"}}}
		if _, err := kubernetes.NewForConfigOrDie(cp.TokenConfig(tok)).RbacV1().ClusterRoleBindings().Create(t.Context(), crb, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			_ = admin(t).RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
			return fmt.Errorf("create clusterrolebinding to cluster-admin with the token: %v, want 403", err)
		}
		return nil
	}
	for _, role := range []string{"admin-group", "other-project", "oidc", "no-groups"} {
		t.Run("a role naming "+role+" carries only the project's identity", func(t *testing.T) {
			tok := token(t, role)
			eventually(t, "the token authenticates", func() error {
				_, err := whoami(t, tok)
				return err
			})
			if err := check(t, role, tok); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("an existing token stays the project's after the role's groups change", func(t *testing.T) {
		tok := token(t, "ci")
		eventually(t, "the ci token authenticates", func() error {
			_, err := whoami(t, tok)
			return err
		})
		if err := check(t, "ci", tok); err != nil {
			t.Fatalf("before the edit: %v", err)
		}
		s.gateProject(t, project, roles(`"kubeadm:cluster-admins", "attack-ci-bots"`))
		consistently(t, "the ci token after the edit", 8*time.Second, func() error { return check(t, "ci", tok) })
	})
	t.Run("no escalation happened", func(t *testing.T) {
		list, err := admin(t).RbacV1().ClusterRoleBindings().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range list.Items {
			if strings.HasPrefix(b.Name, "attack-14-escalated-") {
				t.Errorf("ClusterRoleBinding %s was created with a project token", b.Name)
				_ = admin(t).RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
			}
		}
	})
}

// consistently checks f every 250ms for d; any failure fails the test.
func consistently(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Item 15. Every Application applied with field manager deputy, so one
// Application could take over an object another Application tracks, and
// later prune it. An object tracked by another Application is neither
// applied nor pruned; the resource fails naming that Application.
func TestAttack15SharedObjects(t *testing.T) {
	s := attackEnv(t)
	s.startReplica(t, nil)
	s.waitGateAllows(t, "system:serviceaccount:"+nsShared+":team-a-deployer", nsShared)
	s.waitGateAllows(t, "system:serviceaccount:"+nsShared+":team-b-deployer", nsShared)
	shared := func(owner, password string) []framework.GitFile {
		return []framework.GitFile{
			{Path: "app/cm.yaml", Content: cmYAML("a15-shared", "owner", owner)},
			{Path: "app/secret.yaml", Content: fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: a15-shared-db\nstringData:\n  password: %s\n", password)},
		}
	}
	if _, err := s.git.Commit("/team-a/shared.git", "team A", shared("team-a", s.victimSecret)); err != nil {
		t.Fatal(err)
	}
	ownerApp := tenantApp{ns: nsA, name: "a15-owner", project: projA, repoURL: s.git.RepoURL("/team-a/shared.git"), path: "app", dest: nsShared}
	st := s.syncAndWait(t, ownerApp)
	if st.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("team A's sync into the shared namespace: %s", describe(st))
	}
	owner := nsA + "/a15-owner"
	cs := admin(t)
	before, err := cs.CoreV1().ConfigMaps(nsShared).Get(t.Context(), "a15-shared", metav1.GetOptions{})
	if err != nil || before.Annotations[syncer.TrackingAnnotation] != owner {
		t.Fatalf("team A's ConfigMap: %v %v", err, before.Annotations)
	}
	unchanged := func(t *testing.T) {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps(nsShared).Get(t.Context(), "a15-shared", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("team A's ConfigMap is gone: %v", err)
		}
		if cm.Data["owner"] != "team-a" || cm.Annotations[syncer.TrackingAnnotation] != owner {
			t.Errorf("team A's ConfigMap was taken over: data %v annotations %v", cm.Data, cm.Annotations)
		}
		sec, err := cs.CoreV1().Secrets(nsShared).Get(t.Context(), "a15-shared-db", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("team A's Secret is gone: %v", err)
		}
		if string(sec.Data["password"]) != s.victimSecret || sec.Annotations[syncer.TrackingAnnotation] != owner {
			t.Errorf("team A's Secret was taken over: annotations %v", sec.Annotations)
		}
	}
	thiefRepo := s.git.RepoURL("/team-b/shared.git")
	thief := tenantApp{ns: nsB, name: "a15-thief", project: projB, repoURL: thiefRepo, path: "app", dest: nsShared}
	parent := t
	t.Run("applying team A's objects fails each of them naming team A's Application", func(t *testing.T) {
		files := append(shared("attacker", "attacker-password"), framework.GitFile{Path: "app/own.yaml", Content: cmYAML("a15-thief-own", "owner", "attacker")})
		if _, err := s.git.Commit("/team-b/shared.git", "take over", files); err != nil {
			t.Fatal(err)
		}
		s.requestSyncOwned(t, parent, thief)
		st := waitOperationDone(t, thief.ns, thief.name, 3*time.Minute)
		res := resultsByName(st)
		for _, name := range []string{"ConfigMap/a15-shared", "Secret/a15-shared-db"} {
			r := res[name]
			if r == nil || r.Status != v1alpha1.ResultCodeSyncFailed || !strings.Contains(r.Message, "tracked by Application "+owner) {
				t.Errorf("%s: %+v, want SyncFailed naming %s\n%s", name, r, owner, describe(st))
			}
		}
		if r := res["ConfigMap/a15-thief-own"]; r == nil || r.Status != v1alpha1.ResultCodeSynced {
			t.Errorf("the attacker's own ConfigMap: %+v (only the shared objects fail)\n%s", r, describe(st))
		}
		unchanged(t)
	})
	t.Run("a manifest claiming team A's tracking annotation changes nothing", func(t *testing.T) {
		files := []framework.GitFile{{Path: "app/cm.yaml", Content: fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: a15-shared
  annotations: {%q: %q}
data: {owner: attacker-spoof}
`, syncer.TrackingAnnotation, owner)}}
		if _, err := s.git.Commit("/team-b/shared-spoof.git", "spoof", files); err != nil {
			t.Fatal(err)
		}
		spoof := tenantApp{ns: nsB, name: "a15-spoof", project: projB, repoURL: s.git.RepoURL("/team-b/shared-spoof.git"), path: "app", dest: nsShared}
		s.requestSyncOwned(t, parent, spoof)
		st := waitOperationDone(t, spoof.ns, spoof.name, 3*time.Minute)
		if r := resultsByName(st)["ConfigMap/a15-shared"]; r == nil || r.Status != v1alpha1.ResultCodeSyncFailed {
			t.Errorf("ConfigMap/a15-shared: %+v\n%s", r, describe(st))
		}
		unchanged(t)
	})
	t.Run("pruning does not delete team A's objects", func(t *testing.T) {
		if _, err := s.git.Commit("/team-b/shared.git", "drop them", []framework.GitFile{{Path: "app/own.yaml", Content: cmYAML("a15-thief-own", "owner", "attacker")}}); err != nil {
			t.Fatal(err)
		}
		pruning := thief
		pruning.prune = true
		s.requestSyncOwned(t, parent, pruning)
		st := waitOperationDone(t, pruning.ns, pruning.name, 3*time.Minute)
		t.Logf("the attacker's pruning sync: %s", describe(st))
		unchanged(t)
	})
	t.Run("team A's next sync still owns its objects", func(t *testing.T) {
		s.requestSyncOwned(t, parent, ownerApp)
		st := waitOperationDone(t, ownerApp.ns, ownerApp.name, 3*time.Minute)
		if st.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("%s", describe(st))
		}
		unchanged(t)
	})
}

// Item 16. A policy file rewritten in place in two writes was loaded
// half-written: the first half of a Role whose last line narrowed it with
// resourceNames granted every Secret, with /readyz green. A file is loaded
// only once its content is stable, and a file that lost all its objects is
// a load error (readiness red with the reason, last good policy kept).
func TestAttack16PolicyReload(t *testing.T) {
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy")
	if err := os.Mkdir(policyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(policyDir, "tenant.yaml")
	const ns, user = "attack-reload", "attack-mallory"
	binding := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: %[2]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: %[1]s}
rules:
`, ns, user)
	v1 := binding + "- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]\n"
	// v2's last line narrows the rule to one Secret; without it the rule
	// grants every Secret of the namespace.
	v2First := binding + "- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [get]\n"
	v2Last := "  resourceNames: [public]\n"
	v2 := v2First + v2Last
	writeAtomically := func(content string) {
		t.Helper()
		tmp := filepath.Join(dir, "tmp.yaml")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	writeAtomically(v1)

	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: deputy.CertDir, Args: []string{"--policy", policyDir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("file-mode deputy log (tail):\n%s", tail(d.Logs(), 40))
		}
	})
	client, err := d.Client(true)
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(resource, name string) bool {
		body, _ := json.Marshal(authorizationv1.SubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: resource, Namespace: ns, Name: name}},
		})
		resp, err := client.Post(d.URL+"/authorize", "application/json", bytes.NewReader(body))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var out authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return false
		}
		return out.Status.Allowed
	}
	readyClient, err := d.Client(false)
	if err != nil {
		t.Fatal(err)
	}
	readyz := func() (int, string) {
		resp, err := readyClient.Get(d.URL + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(t *testing.T, what string, f func() bool) {
		t.Helper()
		eventuallyWithin(t, what, 20*time.Second, func() error {
			if !f() {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	waitFor(t, "v1 is loaded", func() bool { return allowed("configmaps", "x") })

	t.Run("a file rewritten in place in two writes is never loaded half-written", func(t *testing.T) {
		var broad atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if allowed("secrets", "private") {
					broad.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(v2First); err != nil {
			t.Fatal(err)
		}
		_ = f.Sync()
		// A slow writer: the first half stays on disk for a moment (well
		// below a settle interval, well above deputy's reload debounce).
		time.Sleep(300 * time.Millisecond)
		if _, err := f.WriteString(v2Last); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "v2 is loaded", func() bool { return allowed("secrets", "public") && !allowed("secrets", "private") })
		close(stop)
		wg.Wait()
		if n := broad.Load(); n > 0 {
			t.Errorf("deputy allowed get secrets/private %d times: it loaded the half-written file, granting more than either version", n)
		}
		if allowed("configmaps", "x") {
			t.Error("after the rewrite deputy still serves v1")
		}
	})
	for _, c := range []struct{ name, content string }{
		{"an empty file", ""},
		{"a file of comments only", "# emptied by a bad deploy\n"},
		{"a file of document separators only", "---\n---\n"},
		{"an empty List", "apiVersion: v1\nkind: List\nitems: []\n"},
	} {
		t.Run(c.name+" after objects is a load error and the last good policy stays", func(t *testing.T) {
			writeAtomically(c.content)
			waitFor(t, "/readyz turns red", func() bool { code, _ := readyz(); return code != http.StatusOK })
			code, body := readyz()
			if !strings.Contains(body, filepath.Base(file)) {
				t.Errorf("/readyz %d does not name %s: %s", code, filepath.Base(file), body)
			}
			if !allowed("secrets", "public") {
				t.Error("the last good policy (v2) is no longer served")
			}
			writeAtomically(v2)
			waitFor(t, "/readyz turns green again", func() bool { code, _ := readyz(); return code == http.StatusOK })
		})
	}
	t.Run("an atomic replacement (rename) is loaded", func(t *testing.T) {
		writeAtomically(v1)
		waitFor(t, "v1 again", func() bool { return allowed("configmaps", "x") && !allowed("secrets", "public") })
	})
}
