package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// Issue 11, items 1-5: what a tenant's Application makes deputy read, and
// from where.

// Item 1. The attacker points an Application at a local path instead of a
// Git URL: deputy's own clone cache, where team A's private repository is
// mirrored at a path anyone can compute, or the Git server's files. Without
// sync.localRepositories every local repository is refused, naming the
// setting; with it, only the listed directories are opened and nothing in
// them may lead outside (gitdir pointers, alternates, symbolic links).
func TestAttack01LocalRepository(t *testing.T) {
	s := attackEnv(t)
	r := s.startReplica(t, nil)
	s.ensureVictimSynced(t)
	s.waitGateAllows(t, "system:serviceaccount:"+nsB+":deployer", nsB)

	victimURL := s.git.RepoURL(victimRepo)
	computed := computeTodayCacheDir(s.cacheDir, victimURL)
	targets := findMirrors(s.cacheDir, victimRepo)
	if len(targets) == 0 {
		t.Logf("no mirror of %s found under %s; attacking the path today's deputy uses", victimURL, s.cacheDir)
		targets = []string{computed}
	}
	mirror := targets[0]
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(cwd, mirror)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	forms := []struct{ name, url string }{
		{"a file URL to the mirror of team A's repository in deputy's cache", "file://" + mirror},
		{"an absolute path to the mirror", mirror},
		{"a file URL naming localhost", "file://localhost" + mirror},
		{"a path relative to deputy's working directory", rel},
		{"a ./ relative path", "./" + strings.TrimPrefix(rel, "./")},
		{"an absolute path with dot segments", filepath.Join(s.cacheDir, "repos") + "/../repos/" + filepath.Base(mirror)},
		{"a percent-encoded file URL", "file://" + percentEncodePath(mirror)},
		{"an upper-case FILE URL", "FILE://" + mirror},
		{"an opaque file: URL", "file:" + mirror},
		{"the Git server's files of team A's repository", s.git.RepoDir(victimRepo)},
	}
	if computed != mirror {
		forms = append(forms, struct{ name, url string }{"the mirror path today's deputy computes", computed})
	}
	for i := 1; i < len(targets); i++ {
		forms = append(forms, struct{ name, url string }{fmt.Sprintf("another cached mirror (%d)", i), targets[i]})
	}
	apps := make([]tenantApp, len(forms))
	for i, f := range forms {
		apps[i] = attackerApp(fmt.Sprintf("a01-local-%d", i), f.url, "app")
		s.requestSync(t, apps[i])
	}
	for i, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			st := waitOperationDone(t, nsB, apps[i].name, 3*time.Minute)
			wantRefused(t, st, "sync.localRepositories")
		})
	}
	t.Run("team A's manifests never reach team B's namespace", func(t *testing.T) {
		s.assertNoVictimData(t, nsB)
	})

	// The opt-in: an operator lists a directory of local repositories.
	if err := r.Stop(); err != nil {
		t.Logf("stopping the replica: %v", err)
	}
	t.Run("a listed directory that is, contains or is inside the cache, keys or credentials is refused at start", func(t *testing.T) {
		// why: the message also says why, in one of these words.
		for _, c := range []struct {
			name, dir string
			why       []string
		}{
			{"the cache directory", s.cacheDir, []string{"cacheDir", "cache directory"}},
			{"a directory inside the cache", filepath.Join(s.cacheDir, "repos"), []string{"cacheDir", "cache directory"}},
			{"a directory containing the cache", s.dir, []string{"cacheDir", "cache directory"}},
			{"the ServiceAccount token directory", "/var/run/secrets", []string{"/var/run/secrets"}},
			{"the TLS certificate directory", deputy.CertDir, []string{deputy.CertDir, "certificate", "tls."}},
			{"a relative directory", "repos", []string{"absolute", "relative"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				d, err := s.tryStartReplica(t, map[string]any{"sync": map[string]any{"localRepositories": []any{c.dir}}})
				if err == nil {
					_ = d.Stop()
					t.Fatalf("deputy started with sync.localRepositories: [%s]", c.dir)
				}
				if !strings.Contains(err.Error(), "sync.localRepositories") {
					t.Errorf("deputy refused the configuration without naming sync.localRepositories: %v", err)
				}
				if !slices.ContainsFunc(c.why, func(w string) bool { return strings.Contains(err.Error(), w) }) {
					t.Errorf("deputy refused the configuration without saying why (one of %q): %v", c.why, err)
				}
			})
		}
	})
	t.Run("with sync.localRepositories only the listed directory is opened and nothing in it leads outside", func(t *testing.T) {
		local := filepath.Join(s.dir, "local-repos")
		legit := filepath.Join(local, "legit.git")
		if _, err := framework.CommitFiles(legit, "legit", []framework.GitFile{{Path: "app/cm.yaml", Content: cmYAML("a01-local-legit", "k", "v")}}); err != nil {
			t.Fatal(err)
		}
		victimHead := strings.TrimSpace(gitOutput(t, s.git.RepoDir(victimRepo), "rev-parse", "refs/heads/main"))
		// A checkout whose .git is a file pointing into the cache.
		pointer := filepath.Join(local, "pointer")
		writeFile(t, filepath.Join(pointer, ".git"), "gitdir: "+mirror+"\n")
		// A symbolic link to the mirror.
		link := filepath.Join(local, "symlinked.git")
		if err := os.Symlink(mirror, link); err != nil {
			t.Fatal(err)
		}
		// A repository borrowing the mirror's objects (alternates).
		alternates := filepath.Join(local, "alternates.git")
		if err := framework.InitBareRepo(alternates); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(alternates, "objects", "info", "alternates"), filepath.Join(mirror, "objects")+"\n")
		writeFile(t, filepath.Join(alternates, "refs", "heads", "main"), victimHead+"\n")
		// A repository whose objects directory is a link into the mirror.
		objlink := filepath.Join(local, "objlink.git")
		if err := framework.InitBareRepo(objlink); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(objlink, "objects")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(mirror, "objects"), filepath.Join(objlink, "objects")); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(objlink, "refs", "heads", "main"), victimHead+"\n")

		s.startReplica(t, map[string]any{"sync": map[string]any{"localRepositories": []any{local}}})
		legitApp := attackerApp("a01-optin-legit", "file://"+legit, "app")
		if st := s.syncAndWait(t, legitApp); st.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("a repository in the listed directory must sync: %s", describe(st))
		}
		for i, f := range []struct{ name, url string }{
			{"a .git file pointing into the cache", pointer},
			{"a symbolic link to the mirror", "file://" + link},
			{"alternates pointing at the mirror's objects", alternates},
			{"an objects directory linked into the mirror", objlink},
			{"dot segments leaving the listed directory", local + "/../cache/repos/" + filepath.Base(mirror)},
			{"the mirror itself", mirror},
		} {
			t.Run(f.name, func(t *testing.T) {
				st := s.syncAndWait(t, attackerApp(fmt.Sprintf("a01-optin-%d", i), f.url, "app"))
				if st.Phase == v1alpha1.OperationSucceeded {
					t.Errorf("synced: %s", describe(st))
				}
			})
		}
		s.assertNoVictimData(t, nsB)
	})
}

func percentEncodePath(p string) string {
	var b strings.Builder
	for _, seg := range strings.Split(p, "/") {
		if seg != "" {
			fmt.Fprintf(&b, "/%%%02X%s", seg[0], seg[1:])
		}
	}
	return b.String()
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gitOutput runs git on the repository gitDir and returns its output.
func gitOutput(t *testing.T, gitDir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"--git-dir=" + gitDir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Item 2. deputy's clone cache folded case and dropped ".git", and fetched
// from a mirror's stored origin: the attacker syncs a URL that differs from
// team A's only in case (a repository it owns on a case-sensitive server)
// so that team A deploys the attacker's commit, or the other way round reads
// team A's repository with team A's credential. One mirror per exact URL;
// every fetch goes to the Application's own URL.
func TestAttack02CloneCacheIdentity(t *testing.T) {
	s := attackEnv(t)
	s.startReplica(t, nil)
	s.waitGateAllows(t, "system:serviceaccount:"+nsA+":deployer", nsA)
	s.waitGateAllows(t, "system:serviceaccount:"+nsB+":deployer", nsB)
	mallory := kubernetes.NewForConfigOrDie(cp.TokenConfig(s.malloryTok))

	for _, c := range []struct {
		name, id, victimPath, attackerPath string
		attackerFirst                      bool
	}{
		{"the attacker syncs a case-twisted URL first", "app2", "/team-a/app2.git", "/TEAM-A/app2.git", true},
		{"the attacker syncs a case-twisted URL without .git after team A", "app3", "/team-a/app3.git", "/TEAM-A/app3", false},
		{"the attacker syncs a mixed-case URL without .git first", "app4", "/team-a/app4.git", "/Team-A/app4", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sentBefore := len(s.git.Requests())
			victimHead, err := s.git.Commit(c.victimPath, "team A", []framework.GitFile{
				{Path: "app/cm.yaml", Content: cmYAML(c.id+"-config", "owner", "team-a")},
				{Path: "app/secret.yaml", Content: fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-db\nstringData:\n  password: %s\n", c.id, s.victimSecret)},
			})
			if err != nil {
				t.Fatal(err)
			}
			attackerHead, err := s.git.Commit(c.attackerPath, "attacker", []framework.GitFile{
				{Path: "app/cm.yaml", Content: cmYAML(c.id+"-config", "owner", "attacker")},
				{Path: "app/backdoor.yaml", Content: fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: %[1]s-backdoor}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[1]s-backdoor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: %[1]s-backdoor}
subjects: [{kind: ServiceAccount, name: mallory, namespace: %[2]s}]
`, c.id, nsB)},
			})
			if err != nil {
				t.Fatal(err)
			}
			victim := victimApp("a02-"+c.id+"-victim", s.git.RepoURL(c.victimPath), "app")
			attacker := attackerApp("a02-"+c.id+"-attacker", s.git.RepoURL(c.attackerPath), "app")
			var vst, ast *v1alpha1.OperationState
			if c.attackerFirst {
				ast = s.syncAndWait(t, attacker)
				vst = s.syncAndWait(t, victim)
			} else {
				vst = s.syncAndWait(t, victim)
				ast = s.syncAndWait(t, attacker)
			}
			if vst.Phase != v1alpha1.OperationSucceeded || vst.SyncResult == nil || vst.SyncResult.Revision != victimHead {
				t.Errorf("team A's sync must deploy team A's commit %s: %s", victimHead, describe(vst))
			}
			if ast.SyncResult != nil && ast.SyncResult.Revision != "" && ast.SyncResult.Revision != attackerHead {
				t.Errorf("the attacker's sync used commit %s, not the attacker's own %s: %s", ast.SyncResult.Revision, attackerHead, describe(ast))
			}
			cs := admin(t)
			if cm, err := cs.CoreV1().ConfigMaps(nsA).Get(t.Context(), c.id+"-config", metav1.GetOptions{}); err != nil || cm.Data["owner"] != "team-a" {
				t.Errorf("team A's ConfigMap: %v %v, want owner team-a", err, cm.Data)
			}
			if _, err := cs.RbacV1().RoleBindings(nsA).Get(t.Context(), c.id+"-backdoor", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the attacker's RoleBinding is in team A's namespace (err %v)", err)
			}
			if _, err := mallory.CoreV1().Secrets(nsA).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("mallory lists team A's Secrets: %v", err)
			}
			if _, err := cs.CoreV1().Secrets(nsB).Get(t.Context(), c.id+"-db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("team A's Secret %s-db is in team B's namespace (err %v)", c.id, err)
			}
			s.assertNoVictimData(t, nsB)
			for _, r := range s.git.Requests()[sentBefore:] {
				if underPrefixPath(r.Path, c.attackerPath) && r.Authorization {
					t.Errorf("a credential (user %q) was sent to the attacker's repository: %s %s", r.User, r.Method, r.RawPath)
				}
			}
		})
	}
}

func underPrefixPath(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// Item 3. Repository credentials matched by a raw string prefix: team A's
// credential for http://HOST:PORT/team-a also went to /team-a-evil, a
// host-wide credential for http://127.0.0.1:4123 went to the attacker's
// server at port 41234, and one for http://127.0.0.1 (port 80) to every
// port. Credentials go only where scheme, host and port are equal and the
// path is the credential's path or below it on a '/' boundary.
func TestAttack03CredentialMatching(t *testing.T) {
	s := attackEnv(t)
	s.startReplica(t, nil)
	s.ensureVictimSynced(t)
	s.waitGateAllows(t, "system:serviceaccount:"+nsB+":deployer", nsB)

	attackerFiles := []framework.GitFile{{Path: "app/cm.yaml", Content: cmYAML("a03-attacker", "k", "v")}}
	for _, p := range []string{"/team-a-evil/app.git", "/team-a.evil/app.git", "/team-a_evil/app.git", "/TEAM-A/cred.git", "/team-b/cred.git"} {
		if _, err := s.git.Commit(p, "attacker", attackerFiles); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.evil.Commit("/team-b/app.git", "attacker", attackerFiles); err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{s.teamAPassword: teamAUser, s.corpPassword: corpUser, s.legacyPassword: legacyUser}
	evilHost := strings.TrimPrefix(s.evil.URL, "http://")

	for i, c := range []struct {
		name   string
		url    string
		server *framework.GitServer
		// strict: no Authorization header at all may arrive; otherwise
		// (the attacker wrote a user name into the URL) no operator
		// password may.
		strict bool
	}{
		{"a path sharing team A's prefix with a dash", s.git.URL + "/team-a-evil/app.git", s.git, true},
		{"a path sharing team A's prefix with a dot", s.git.URL + "/team-a.evil/app.git", s.git, true},
		{"a path sharing team A's prefix with an underscore", s.git.URL + "/team-a_evil/app.git", s.git, true},
		{"team A's path in another case (a case-sensitive server)", s.git.URL + "/TEAM-A/cred.git", s.git, true},
		{"dot segments leaving team A's path", s.git.URL + "/team-a/../team-b/cred.git", s.git, true},
		{"percent-encoded dot segments leaving team A's path", s.git.URL + "/team-a/%2e%2e/team-b/cred.git", s.git, true},
		{"another port on the host of a port-less credential", s.git.URL + "/team-b/cred.git", s.git, true},
		{"a port whose digits extend a host-wide credential's port", s.evil.URL + "/team-b/app.git", s.evil, true},
		{"a credential's URL as user info before the attacker's host", "http://127.0.0.1:" + fmt.Sprint(s.corpPort) + "@" + evilHost + "/team-b/app.git", s.evil, false},
		{"a user name in the URL of the attacker's host", "http://" + corpUser + "@" + evilHost + "/team-b/app.git", s.evil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(c.server.Requests())
			st := s.syncAndWait(t, attackerApp(fmt.Sprintf("a03-cred-%d", i), c.url, "app"))
			t.Logf("the attacker's sync: %s", describe(st))
			for _, r := range c.server.Requests()[before:] {
				if r.Path == victimRepo || strings.HasPrefix(r.Path, victimRepo+"/") {
					continue // team A's own repository (another replica's fetch)
				}
				if user, ok := passwords[r.Password]; ok && r.Password != "" {
					t.Errorf("the operator's credential %s reached %s %s", user, r.Method, r.RawPath)
				} else if c.strict && r.Authorization {
					t.Errorf("an Authorization header (user %q) reached %s %s", r.User, r.Method, r.RawPath)
				}
			}
		})
	}
	t.Run("team A's credential still reaches team A's repository", func(t *testing.T) {
		before := len(s.git.Requests())
		st := s.syncAndWait(t, victimApp("victim-app", s.git.RepoURL(victimRepo), "app"))
		if st.Phase != v1alpha1.OperationSucceeded {
			t.Fatalf("team A's sync: %s", describe(st))
		}
		found := false
		for _, r := range s.git.Requests()[before:] {
			if underPrefixPath(r.Path, victimRepo) && r.User == teamAUser && r.Password == s.teamAPassword {
				found = true
			}
		}
		if !found {
			t.Errorf("no request to %s carried team A's credential", victimRepo)
		}
	})
}

// Item 4. kustomize fetched http(s) resources, bases, components and
// generator files, and cloned Git URLs, with no timeout or size limit: the
// attacker read an endpoint only deputy's Pod reaches (SSRF) into a
// ConfigMap of its own, and a never-ending URL held every sync worker.
// Remote loading is off unless the operator turns it on; a remote reference
// fails the render naming sync.kustomize.remoteResources before any request;
// exec and KRM function plugins stay off.
func TestAttack04KustomizeRemote(t *testing.T) {
	s := attackEnv(t)
	first := s.startReplica(t, nil)
	s.ensureVictimSynced(t)
	s.waitGateAllows(t, "system:serviceaccount:"+nsB+":deployer", nsB)
	internal := startInternalEndpoint(t)
	in := internal.URL
	host := strings.TrimPrefix(in, "http://")
	mirrors := findMirrors(s.cacheDir, victimRepo)
	mirror := computeTodayCacheDir(s.cacheDir, s.git.RepoURL(victimRepo))
	if len(mirrors) > 0 {
		mirror = mirrors[0]
	}
	marker := filepath.Join(s.dir, "a04-exec-marker")
	localCM := cmYAML("a04-local", "k", "v")

	const remote = "sync.kustomize.remoteResources"
	cases := []struct {
		name, dir, kustomization string
		extra                    []framework.GitFile
		want                     string // substring the message must hold ("" = any error)
	}{
		{"an http resource", "http-resource", "resources: [" + in + "/latest/meta-data.yaml]", nil, remote},
		{"an https resource", "https-resource", "resources: [https://" + host + "/latest/meta-data.yaml]", nil, remote},
		{"an http resource with a query", "http-query", "resources: ['" + in + "/latest/meta-data.yaml?x=1']", nil, remote},
		{"a Git URL over http", "git-http", "resources: ['" + in + "/org/repo.git//base?ref=main']", nil, remote},
		{"a git:: URL", "git-prefixed", "resources: ['git::" + in + "/org/repo.git//base']", nil, remote},
		{"an ssh URL", "ssh", "resources: ['ssh://git@" + host + "/org/repo.git']", nil, remote},
		{"a host/org/repo reference", "github-style", "resources: ['github.com/attack-e2e/remote-base//base?ref=v1']", nil, remote},
		{"a file URL to deputy's cache", "file-url", "resources: ['file://" + mirror + "//app']", nil, remote},
		{"a remote base (bases)", "bases", "bases: ['" + in + "/org/repo.git//base']", nil, remote},
		{"a remote component", "component", "components: ['" + in + "/org/repo.git//component']", nil, remote},
		{"a configMapGenerator file", "cm-generator", "configMapGenerator:\n- name: a04-generated\n  files: [" + in + "/latest/meta-data.yaml]", nil, remote},
		{"a secretGenerator env file", "secret-generator", "secretGenerator:\n- name: a04-generated\n  envs: [" + in + "/latest/token.env]", nil, remote},
		{"a remote patch", "patch", "resources: [cm.yaml]\npatches:\n- path: " + in + "/latest/patch.yaml", []framework.GitFile{{Path: "cm.yaml", Content: localCM}}, remote},
		{"a remote transformer configuration", "transformer", "resources: [cm.yaml]\ntransformers: [" + in + "/latest/transformer.yaml]", []framework.GitFile{{Path: "cm.yaml", Content: localCM}}, remote},
		{"a remote generator configuration", "generator", "generators: [" + in + "/latest/generator.yaml]", nil, remote},
		{"a remote replacement", "replacement", "resources: [cm.yaml]\nreplacements:\n- path: " + in + "/latest/replacement.yaml", []framework.GitFile{{Path: "cm.yaml", Content: localCM}}, remote},
		{"a remote OpenAPI schema", "openapi", "resources: [cm.yaml]\nopenapi:\n  path: " + in + "/latest/openapi.yaml", []framework.GitFile{{Path: "cm.yaml", Content: localCM}}, remote},
		{"a remote CRD", "crds", "resources: [cm.yaml]\ncrds: [" + in + "/latest/crd.yaml]", []framework.GitFile{{Path: "cm.yaml", Content: localCM}}, remote},
		{"a local base that references a remote resource", "nested", "resources: [../nested-base]", nil, remote},
		{"a Helm chart from a repository", "helm", "helmCharts:\n- name: a04-chart\n  repo: " + in + "/charts\n  version: 1.0.0\n  releaseName: a04", nil, ""},
		{"an exec KRM function", "exec-fn", "generators: [fn.yaml]", []framework.GitFile{{Path: "fn.yaml", Content: fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: a04-fn
  annotations:
    config.kubernetes.io/function: |
      exec:
        path: /bin/sh
        args: ["-c", "touch %s; cat"]
`, marker)}}, ""},
	}
	files := []framework.GitFile{{Path: "nested-base/kustomization.yaml", Content: "resources: [" + in + "/latest/meta-data.yaml]\n"}}
	for _, c := range cases {
		files = append(files, framework.GitFile{Path: c.dir + "/kustomization.yaml", Content: c.kustomization + "\n"})
		for _, f := range c.extra {
			f.Path = c.dir + "/" + f.Path
			files = append(files, f)
		}
	}
	if _, err := s.git.Commit("/team-b/kustomize.git", "remote references", files); err != nil {
		t.Fatal(err)
	}
	apps := make([]tenantApp, len(cases))
	for i, c := range cases {
		apps[i] = attackerApp("a04-"+c.dir, s.git.RepoURL("/team-b/kustomize.git"), c.dir)
		s.requestSync(t, apps[i])
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := waitOperationDone(t, nsB, apps[i].name, 3*time.Minute)
			if c.want == "" {
				wantRefused(t, st)
			} else {
				wantRefused(t, st, c.want)
			}
		})
	}
	t.Run("the internal endpoint received no connection", func(t *testing.T) {
		if n := internal.Connections(); n != 0 {
			t.Errorf("the internal endpoint accepted %d connections", n)
		}
		cs := admin(t)
		if _, err := cs.CoreV1().ConfigMaps(nsB).Get(t.Context(), "internal-metadata", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the internal endpoint's ConfigMap is in team B's namespace (err %v)", err)
		}
		cms, err := cs.CoreV1().ConfigMaps(nsB).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cms.Items {
			if strings.HasPrefix(c.Name, "a04-generated") {
				t.Errorf("ConfigMap %s was generated from the internal endpoint: %v", c.Name, c.Data)
			}
		}
		secrets, err := cs.CoreV1().Secrets(nsB).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets.Items {
			if strings.HasPrefix(sec.Name, "a04-generated") {
				t.Errorf("Secret %s was generated from the internal endpoint", sec.Name)
			}
		}
		s.assertNoVictimData(t, nsB)
	})
	t.Run("no exec function ran", func(t *testing.T) {
		if _, err := os.Stat(marker); err == nil {
			t.Error("the exec KRM function ran inside deputy")
		}
	})

	t.Run("with remoteResources on, a never-ending URL and an oversized file end the operation", func(t *testing.T) {
		remoteEnd := startInternalEndpoint(t)
		files := []framework.GitFile{
			{Path: "slow-1/kustomization.yaml", Content: "resources: [" + remoteEnd.URL + "/slow/one.yaml]\n"},
			{Path: "slow-2/kustomization.yaml", Content: "resources: [" + remoteEnd.URL + "/slow/two.yaml]\n"},
			{Path: "big/kustomization.yaml", Content: "resources: [" + remoteEnd.URL + "/big/cm.yaml]\n"},
			{Path: "ok/kustomization.yaml", Content: "resources: [" + remoteEnd.URL + "/latest/meta-data.yaml]\n"},
		}
		if _, err := s.git.Commit("/team-b/kustomize-optin.git", "opt-in", files); err != nil {
			t.Fatal(err)
		}
		if err := first.Stop(); err != nil {
			t.Logf("stopping the replica: %v", err)
		}
		s.startReplica(t, map[string]any{"sync": map[string]any{
			"parallelism": 2,
			"kustomize":   map[string]any{"remoteResources": true, "remoteTimeout": "3s"},
			"limits":      map[string]any{"maxFileBytes": "1Mi"},
		}})
		repo := s.git.RepoURL("/team-b/kustomize-optin.git")
		slow := []tenantApp{attackerApp("a04-optin-slow-1", repo, "slow-1"), attackerApp("a04-optin-slow-2", repo, "slow-2")}
		for _, a := range slow {
			s.requestSync(t, a)
		}
		victim := victimApp("victim-app", s.git.RepoURL(victimRepo), "app")
		s.requestSync(t, victim)
		for _, a := range slow {
			if st := waitOperationDone(t, nsB, a.name, 3*time.Minute); st.Phase == v1alpha1.OperationSucceeded {
				t.Errorf("%s: a never-ending remote resource synced: %s", a.name, describe(st))
			}
		}
		if st := waitOperationDone(t, nsA, victim.name, 3*time.Minute); st.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("team A's sync: %s", describe(st))
		}
		if st := s.syncAndWait(t, attackerApp("a04-optin-big", repo, "big")); st.Phase == v1alpha1.OperationSucceeded || !strings.Contains(st.Message, "sync.limits.maxFileBytes") {
			t.Errorf("a remote file over maxFileBytes: %s", describe(st))
		}
		if st := s.syncAndWait(t, attackerApp("a04-optin-ok", repo, "ok")); st.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("with remoteResources on a remote resource within the limits syncs: %s", describe(st))
		}
	})
}

// Item 5. Rendering read whole blobs: a file of 1 GiB of zeros compresses to
// about a megabyte and took deputy to gigabytes, and each new leader re-ran
// the operation and died the same way. Limits on bytes per file and per
// render, files and objects per render, bytes per fetch and time per
// operation fail the operation naming the limit's field; deputy survives;
// an interrupted operation is retried at most maxOperationAttempts (3)
// times.
func TestAttack05RenderLimits(t *testing.T) {
	s := attackEnv(t)
	r := s.startReplica(t, nil)
	s.waitGateAllows(t, "system:serviceaccount:"+nsB+":deployer", nsB)

	const mib = 1 << 20
	smallCM := cmYAML("a05-after-padding", "k", "v")
	// Each case in a repository of its own: a renderer that reads more than
	// the source path (kustomize's inputs exported to disk, say) must still
	// meet the limit the case is about first.
	many := func(n int, name func(int) string, f framework.GitFile) []framework.GitFile {
		out := make([]framework.GitFile, 0, n)
		for i := range n {
			g := f
			g.Path = name(i)
			out = append(out, g)
		}
		return out
	}
	padded30 := framework.GitFile{Content: "# end\n", Padding: 30 * mib}
	names := func(format string) func(int) string { return func(i int) string { return fmt.Sprintf(format, i) } }
	var objects strings.Builder
	for i := range 10001 { // over maxObjects (10000); a kind no cluster has
		fmt.Fprintf(&objects, "apiVersion: attack.example.com/v1\nkind: Nothing\nmetadata: {name: n-%d}\n---\n", i)
	}
	var kustomizeResources []string
	for i := range 9 {
		kustomizeResources = append(kustomizeResources, fmt.Sprintf("f%d.yaml", i))
	}
	cases := []struct {
		name, repo, want string
		files            []framework.GitFile
	}{
		// One manifest over maxFileBytes (32Mi), valid YAML all along.
		{"a manifest over maxFileBytes", "big-file", "sync.limits.maxFileBytes",
			[]framework.GitFile{{Path: "app/big.yaml", Content: smallCM, Padding: 40 * mib}}},
		{"a kustomize input over maxFileBytes", "big-kustomize", "sync.limits.maxFileBytes", []framework.GitFile{
			{Path: "app/kustomization.yaml", Content: "resources: [big.yaml]\n"},
			{Path: "app/big.yaml", Content: smallCM, Padding: 40 * mib}}},
		// Nine files of 30 MiB: each under maxFileBytes, together over
		// maxRenderBytes (256Mi).
		{"manifests over maxRenderBytes together", "render-bytes", "sync.limits.maxRenderBytes",
			many(9, names("app/f%d.yaml"), padded30)},
		{"symbolic links reading one file over and over", "render-links", "sync.limits.maxRenderBytes",
			append(many(9, names("app/link%d.yaml"), framework.GitFile{Link: "real.yaml"}), framework.GitFile{Path: "app/real.yaml", Content: "# real\n", Padding: 30 * mib})},
		{"kustomize inputs over maxRenderBytes together", "render-kustomize", "sync.limits.maxRenderBytes",
			append(many(9, names("app/f%d.yaml"), padded30), framework.GitFile{Path: "app/kustomization.yaml", Content: "resources: [" + strings.Join(kustomizeResources, ", ") + "]\n"})},
		{"more files than maxFiles", "many-files", "sync.limits.maxFiles",
			many(20001, names("app/f%05d.yaml"), framework.GitFile{Content: "# empty\n"})},
		{"more objects than maxObjects", "many-objects", "sync.limits.maxObjects",
			[]framework.GitFile{{Path: "app/objects.yaml", Content: objects.String()}}},
		{"a YAML alias bomb", "alias-bomb", "", []framework.GitFile{{Path: "app/bomb.yaml", Content: aliasBomb()}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			repo := "/team-b/limits-" + c.repo + ".git"
			if _, err := s.git.Commit(repo, c.name, c.files); err != nil {
				t.Fatal(err)
			}
			st := s.syncAndWait(t, attackerApp("a05-"+c.repo, s.git.RepoURL(repo), "app"))
			if c.want == "" {
				wantRefused(t, st)
			} else {
				wantRefused(t, st, c.want)
			}
			if r.Exited() {
				t.Fatalf("deputy exited:\n%s", tail(r.Logs(), 40))
			}
		})
	}
	t.Run("deputy survives and keeps serving", func(t *testing.T) {
		checkHealthy(t, r.Deputy)
		if peak, err := framework.PeakRSS(r.PID()); err == nil {
			t.Logf("peak RSS of the replica after the limit attacks: %d MiB", peak/mib)
		}
	})

	t.Run("a 1 GiB file compressing to a megabyte outside the path stops the fetch", func(t *testing.T) {
		if _, err := s.git.Commit("/team-b/bomb.git", "bomb", []framework.GitFile{
			{Path: "app/cm.yaml", Content: cmYAML("a05-bomb", "k", "v")},
			// Outside spec.source.path: fetching alone must be bounded.
			{Path: "other/bomb.bin", Zeros: 1 << 30},
		}); err != nil {
			t.Fatal(err)
		}
		if err := r.Stop(); err != nil {
			t.Logf("stopping the replica: %v", err)
		}
		b := s.startReplica(t, map[string]any{"sync": map[string]any{"limits": map[string]any{"maxFetchBytes": "64Mi", "operationTimeout": "20s"}}})
		st := s.syncAndWait(t, attackerApp("a05-bomb", s.git.RepoURL("/team-b/bomb.git"), "app"))
		// The fetch is refused by the fetch limit, or by the per-file limit
		// applied to the blobs it receives; either names its field.
		wantRefused(t, st)
		if !strings.Contains(st.Message, "sync.limits.maxFetchBytes") && !strings.Contains(st.Message, "sync.limits.maxFileBytes") {
			t.Errorf("the message names neither sync.limits.maxFetchBytes nor sync.limits.maxFileBytes: %s", describe(st))
		}
		if b.Exited() {
			t.Fatalf("deputy exited:\n%s", tail(b.Logs(), 40))
		}
		peak, err := framework.PeakRSS(b.PID())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("peak RSS while fetching the 1 GiB bomb: %d MiB", peak/mib)
		if peak > 512*mib {
			t.Errorf("peak RSS %d MiB while refusing a 1 GiB object: the fetch is not bounded", peak/mib)
		}
		t.Run("a Git server that never answers ends at operationTimeout", func(t *testing.T) {
			st := s.syncAndWait(t, attackerApp("a05-timeout", s.git.URL+"/hang/timeout.git", "app"))
			wantRefused(t, st, "sync.limits.operationTimeout")
		})
		if err := b.Stop(); err != nil {
			t.Logf("stopping the replica: %v", err)
		}
	})

	t.Run("an operation whose leader dies is run by at most 3 leaders, then ends in Error", func(t *testing.T) {
		app := attackerApp("a05-retry", s.git.URL+"/hang/retry.git", "app")
		runs := 0
		requested := false
		for leader := 1; leader <= 6; leader++ {
			// Once the operation has ended, a new leader still reads the
			// repository (drift detection resolves every Application's
			// revision): that is not a run of the operation.
			if requested {
				if a := getApplication(t, nsB, app.name); a.Operation == nil && a.Status.OperationState != nil &&
					a.Status.OperationState.Phase != v1alpha1.OperationRunning {
					break
				}
			}
			before := len(s.git.RequestsUnder("/hang/retry.git"))
			rep := s.startReplica(t, nil)
			if !requested {
				s.requestSync(t, app)
				requested = true
			}
			ran, done := false, false
			deadline := time.Now().Add(90 * time.Second)
			for !ran && !done {
				if time.Now().After(deadline) {
					t.Fatalf("leader %d neither ran nor ended the operation within 90s", leader)
				}
				a := getApplication(t, nsB, app.name)
				done = a.Operation == nil && a.Status.OperationState != nil && a.Status.OperationState.Phase != v1alpha1.OperationRunning
				if done {
					// Ended (in Error): a read of the repository now is drift
					// detection's, not a run of the operation.
					break
				}
				ran = len(s.git.RequestsUnder("/hang/retry.git")) > before
				time.Sleep(200 * time.Millisecond)
			}
			if !ran {
				break
			}
			runs++
			// The leader dies mid-operation (as an out-of-memory kill would).
			if err := rep.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = rep.Wait(30 * time.Second)
		}
		if runs > 3 {
			t.Errorf("the interrupted operation was run by %d leaders, want at most maxOperationAttempts (3)", runs)
		}
		a := getApplication(t, nsB, app.name)
		st := a.Status.OperationState
		if a.Operation != nil || st == nil || st.Phase != v1alpha1.OperationError {
			t.Fatalf("after %d runs the operation is still pending or did not end in Error: operation %v state %+v", runs, a.Operation, st)
		}
		if msg := strings.ToLower(st.Message); !strings.Contains(msg, "3") || (!strings.Contains(msg, "attempt") && !strings.Contains(msg, "interrupt")) {
			t.Errorf("the final message does not name the attempts: %s", describe(st))
		}
	})
}

// aliasBomb is a "billion laughs" YAML document: a few hundred bytes that
// expand to billions of nodes.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a05-bomb}\ndata:\n  a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// checkHealthy checks that d answers /healthz with 200.
func checkHealthy(t *testing.T, d *framework.Deputy) {
	t.Helper()
	c, err := d.Client(false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(d.URL + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
}
