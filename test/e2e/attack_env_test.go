package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// The multi-tenant attack suite (issue 11, SCENARIOS.md journey 6 "A hostile
// tenant"). Two tenants share the cluster: team A (the victim, namespace
// attack-team-a) syncs a private repository that needs credentials; team B
// (the attacker, namespace attack-team-b) may create Applications in its own
// namespace and owns its own repositories, nothing else. deputy runs as in
// manifests/base: cluster mode as the ServiceAccount deputy-system/deputy with
// exactly manifests/base/rbac.yaml, sync.impersonation.enabled, and the
// tenants' AppProjects in deputy-system admitting each tenant's namespace
// through spec.sourceNamespaces. Each TestAttackNN is one item of the issue;
// its subtests are other spellings of the same attack. They assert the fixed
// behaviour of /work/notes/issue11-contract.md and real effects (the victim's
// Secret never appears in the attacker's namespace, a server never received a
// credential or a connection, kube-apiserver answered Forbidden with the
// gate's reason).
//
// The sync tests start their own replica of deputy (the suite's main deputy
// answers kube-apiserver's webhooks and, in every test here, is the
// impersonation gate); the gate tests talk to kube-apiserver as
// deputy-system/deputy. Everything the suite creates carries attackLabel and
// is removed by attackTeardown (called from TestMain).

const (
	nsA      = "attack-team-a" // the victim tenant
	nsB      = "attack-team-b" // the attacker tenant
	nsShared = "attack-shared" // a namespace both projects may deploy to (item 15)
	nsOther  = "attack-other"  // a namespace no tenant project has as destination

	deputyUser = "system:serviceaccount:deputy-system:deputy"

	projA = "attack-team-a"
	projB = "attack-team-b"

	attackLabel = "e2e.deputy.dev/attack"

	// The victim's private repository (basic auth under /team-a) and its
	// manifests: a ConfigMap and a Secret.
	victimRepo       = "/team-a/app.git"
	victimSecretName = "team-a-db"
	victimConfigName = "team-a-config"
	teamAUser        = "team-a-bot"
	corpUser         = "corp-bot"
	legacyUser       = "legacy-bot"
)

// attackSuite is what the attack tests share: the Git servers, the tenants'
// namespaces, ServiceAccounts, RBAC and AppProjects, and the files of the
// sync replicas.
type attackSuite struct {
	dir        string
	cacheDir   string // sync.cacheDir of every replica (shared: a mirror outlives a replica)
	policyDir  string
	kubeconfig string // deputy-system/deputy's token
	deputyTok  string
	malloryTok string

	// git is the tenants' Git host; /team-a needs team A's credential.
	git *framework.GitServer
	// evil is a Git server the attacker runs itself, on a port whose
	// decimal digits start with corpPort: a host-wide credential for
	// http://127.0.0.1:<corpPort> shares a string prefix with it.
	evil     *framework.GitServer
	corpPort int

	teamAPassword, corpPassword, legacyPassword string
	victimSecret                                string // the value of the victim's Secret

	mapper    meta.RESTMapper
	replicaID atomic.Int64

	victimOnce sync.Mutex
	victimDone bool
}

var attackState struct {
	mu    sync.Mutex
	suite *attackSuite
	err   error
}

// attackEnv returns the shared attack setup, creating it on first use.
func attackEnv(t *testing.T) *attackSuite {
	t.Helper()
	attackState.mu.Lock()
	defer attackState.mu.Unlock()
	if attackState.suite == nil && attackState.err == nil {
		attackState.suite, attackState.err = setupAttackSuite()
	}
	if attackState.err != nil {
		t.Fatalf("attack suite setup: %v", attackState.err)
	}
	return attackState.suite
}

// attackTeardown removes what the attack suite created; TestMain calls it
// after the tests.
func attackTeardown() {
	attackState.mu.Lock()
	defer attackState.mu.Unlock()
	s := attackState.suite
	if s == nil {
		return
	}
	attackState.suite = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.deleteLabelled(ctx)
	if s.git != nil {
		_ = s.git.Close()
	}
	if s.evil != nil {
		_ = s.evil.Close()
	}
	_ = os.RemoveAll(s.dir)
}

func randomString() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func setupAttackSuite() (*attackSuite, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp(work, "attack-")
	if err != nil {
		return nil, err
	}
	s := &attackSuite{dir: dir, cacheDir: filepath.Join(dir, "cache"), policyDir: filepath.Join(dir, "policy"),
		teamAPassword: "team-a-" + randomString(), corpPassword: "corp-" + randomString(), legacyPassword: "legacy-" + randomString(),
		victimSecret: "victim-db-password-" + randomString()}
	if err := os.MkdirAll(s.policyDir, 0o700); err != nil {
		return s, err
	}
	// An empty policy file, like manifests/base's deputy-policy ConfigMap.
	if err := os.WriteFile(filepath.Join(s.policyDir, "policy.yaml"), []byte("apiVersion: v1\nkind: List\nitems: []\n"), 0o600); err != nil {
		return s, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Admin)
	if err != nil {
		return s, err
	}
	s.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	// The attacker's own Git server, and a port number that is a decimal
	// prefix of its port (e.g. 4123 for 41234) for the host-wide credential.
	if s.evil, err = framework.StartGitServer(framework.GitServerOptions{}); err != nil {
		return s, err
	}
	s.corpPort = s.evil.Port() / 10
	// The tenants' Git host, on a port the host-wide credential does not
	// prefix.
	for i := 0; ; i++ {
		g, err := framework.StartGitServer(framework.GitServerOptions{
			Auth: []framework.GitAuth{{PathPrefix: "/team-a", Username: teamAUser, Password: s.teamAPassword}},
			Hang: []string{"/hang"},
		})
		if err != nil {
			return s, err
		}
		if !strings.HasPrefix(strconv.Itoa(g.Port()), strconv.Itoa(s.corpPort)) || i == 5 {
			s.git = g
			break
		}
		_ = g.Close()
	}

	for _, ns := range []string{deputyNamespace, nsA, nsB, nsShared, nsOther} {
		if err := s.apply(ctx, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", ns)); err != nil {
			return s, err
		}
	}
	// deputy's identity and RBAC, exactly as the install manifests grant them.
	rbacFile := filepath.Join(framework.RepoRoot(), "manifests", "base", "rbac.yaml")
	if out, stderr, err := cp.Kubectl(ctx, nil, "apply", "-f", rbacFile); err != nil {
		return s, fmt.Errorf("kubectl apply -f %s: %v\n%s%s", rbacFile, err, out, stderr)
	}
	if s.deputyTok, err = saToken(ctx, deputyNamespace, "deputy"); err != nil {
		return s, err
	}
	s.kubeconfig = filepath.Join(dir, "deputy.kubeconfig")
	if err := cp.WriteTokenKubeconfig(s.kubeconfig, s.deputyTok); err != nil {
		return s, err
	}

	// The tenants: each project's ServiceAccount may manage the usual
	// namespaced objects in its own namespace, and ConfigMaps and Secrets in
	// the shared namespace. Mallory (team B) may only write Applications in
	// team B's namespace.
	tenantRules := `- apiGroups: [""]
  resources: [configmaps, secrets, serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, patch, delete]
`
	var objs strings.Builder
	for _, team := range []struct{ ns, shared string }{{nsA, "team-a-deployer"}, {nsB, "team-b-deployer"}} {
		fmt.Fprintf(&objs, `apiVersion: v1
kind: ServiceAccount
metadata: {name: deployer, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: deployer, namespace: %[1]s}
rules:
%[3]s---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deployer, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: deployer}
subjects: [{kind: ServiceAccount, name: deployer, namespace: %[1]s}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %[2]s, namespace: %[4]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: %[2]s, namespace: %[4]s}
rules:
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[2]s, namespace: %[4]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: %[2]s}
subjects: [{kind: ServiceAccount, name: %[2]s, namespace: %[4]s}]
---
`, team.ns, team.shared, tenantRules, nsShared)
	}
	fmt.Fprintf(&objs, `apiVersion: v1
kind: ServiceAccount
metadata: {name: mallory, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: application-writer, namespace: %[1]s}
rules:
- apiGroups: [deputy.dev]
  resources: [applications]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: mallory-applications, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: application-writer}
subjects: [{kind: ServiceAccount, name: mallory, namespace: %[1]s}]
`, nsB)
	if err := s.apply(ctx, objs.String()); err != nil {
		return s, err
	}
	if s.malloryTok, err = saToken(ctx, nsB, "mallory"); err != nil {
		return s, err
	}

	// The operator's AppProjects, in deputy's namespace, each admitting its
	// tenant's namespace (the contract's layout), plus a copy of each in the
	// tenant's own namespace: today's deputy looks projects up next to the
	// Application, the fixed deputy must ignore those copies (they are
	// outside sync.projectNamespaces). With the copies the same suite shows
	// each sync attack succeeding on today's deputy instead of every sync
	// failing for want of a project.
	for _, p := range []struct{ name, ns, shared string }{{projA, nsA, "team-a-deployer"}, {projB, nsB, "team-b-deployer"}} {
		spec := fmt.Sprintf(`  sourceRepos: ["*"]
  destinations:
  - {server: %[1]s, namespace: %[2]s}
  - {server: %[1]s, namespace: %[3]s}
  destinationServiceAccounts:
  - {server: %[1]s, namespace: %[2]s, defaultServiceAccount: deployer}
  - {server: %[1]s, namespace: %[3]s, defaultServiceAccount: %[4]s}
`, inCluster, p.ns, nsShared, p.shared)
		if err := s.apply(ctx, fmt.Sprintf(`apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  sourceNamespaces: [%[3]s]
%[4]s---
apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: %[1]s, namespace: %[3]s}
spec:
%[4]s`, p.name, deputyNamespace, p.ns, spec)); err != nil {
			return s, err
		}
	}

	// The repositories: team A's private one, team B's own.
	if _, err := s.git.Commit(victimRepo, "team A", victimManifests("app", s.victimSecret)); err != nil {
		return s, err
	}
	if _, err := s.git.Commit("/team-b/app.git", "team B", []framework.GitFile{
		{Path: "app/cm.yaml", Content: cmYAML("team-b-config", "owner", "team-b")}}); err != nil {
		return s, err
	}
	return s, nil
}

// victimManifests are team A's manifests under dir: a ConfigMap and the
// Secret the attacker is after.
func victimManifests(dir, secret string) []framework.GitFile {
	return []framework.GitFile{
		{Path: dir + "/config.yaml", Content: cmYAML(victimConfigName, "owner", "team-a")},
		{Path: dir + "/secret.yaml", Content: fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\nstringData:\n  password: %s\n", victimSecretName, secret)},
	}
}

func cmYAML(name string, kv ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n", name)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "  %s: %q\n", kv[i], kv[i+1])
	}
	return b.String()
}

func saToken(ctx context.Context, ns, name string) (string, error) {
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// apply server-side applies every object of a multi-document YAML with the
// admin identity, labelled attackLabel.
func (s *attackSuite) apply(ctx context.Context, manifests string) error {
	objs, err := decodeObjects(manifests)
	if err != nil {
		return err
	}
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	for _, u := range objs {
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[attackLabel] = "true"
		u.SetLabels(labels)
		ri, err := s.resourceFor(dyn, u)
		if err != nil {
			return err
		}
		data, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		force := true
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "e2e-attack", Force: &force}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}

// remove deletes every object of a multi-document YAML (missing ones are fine).
func (s *attackSuite) remove(ctx context.Context, manifests string) error {
	objs, err := decodeObjects(manifests)
	if err != nil {
		return err
	}
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	for _, u := range objs {
		ri, err := s.resourceFor(dyn, u)
		if err != nil {
			return err
		}
		if err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

func (s *attackSuite) resourceFor(dyn dynamic.Interface, u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if r, ok := s.mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
		}
		if m, err = s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, err
		}
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return dyn.Resource(m.Resource), nil
}

func decodeObjects(manifests string) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// deleteLabelled removes the suite's cluster-scoped objects, its objects in
// shared namespaces, and its namespaces.
func (s *attackSuite) deleteLabelled(ctx context.Context) {
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	sel := metav1.ListOptions{LabelSelector: attackLabel}
	for _, gvr := range []struct {
		group, version, resource string
		namespaced               bool
	}{
		{"rbac.authorization.k8s.io", "v1", "clusterrolebindings", false},
		{"rbac.authorization.k8s.io", "v1", "clusterroles", false},
		{"deputy.dev", "v1alpha1", "appprojects", true},
		{"deputy.dev", "v1alpha1", "applications", true},
		{"argoproj.io", "v1alpha1", "appprojects", true},
		{"rbac.authorization.k8s.io", "v1", "rolebindings", true},
		{"rbac.authorization.k8s.io", "v1", "roles", true},
	} {
		r := dyn.Resource(schemaGVR(gvr.group, gvr.version, gvr.resource))
		var list *unstructured.UnstructuredList
		var err error
		if gvr.namespaced {
			list, err = r.Namespace("").List(ctx, sel)
		} else {
			list, err = r.List(ctx, sel)
		}
		if err != nil {
			continue
		}
		for _, item := range list.Items {
			if gvr.namespaced {
				_ = r.Namespace(item.GetNamespace()).Delete(ctx, item.GetName(), metav1.DeleteOptions{})
			} else {
				_ = r.Delete(ctx, item.GetName(), metav1.DeleteOptions{})
			}
		}
	}
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	if nss, err := cs.CoreV1().Namespaces().List(ctx, sel); err == nil {
		for _, ns := range nss.Items {
			if ns.Name == deputyNamespace || ns.Name == "argocd" {
				continue // shared with the other e2e tests
			}
			_ = cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		}
	}
}

// --- the sync replicas -------------------------------------------------------

// syncDeputy is one `deputy serve` replica running the Application
// controller for the tenants' namespaces.
type syncDeputy struct {
	*framework.Deputy
	identity string
}

// replicaConfig is a replica's DeputyConfiguration: manifests/base's sync
// settings (impersonation enabled, the Lease deputy-sync in deputy-system),
// the tenants' namespaces, the operator's repository credentials, and
// extra merged on top (nil for none).
func (s *attackSuite) replicaConfig(identity string, extra map[string]any) ([]byte, error) {
	cred := func(name, url, user, pass string) (map[string]any, error) {
		uf, pf := filepath.Join(s.dir, name+".user"), filepath.Join(s.dir, name+".pass")
		if err := os.WriteFile(uf, []byte(user+"\n"), 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(pf, []byte(pass+"\n"), 0o600); err != nil {
			return nil, err
		}
		return map[string]any{"url": url, "usernameFile": uf, "passwordFile": pf}, nil
	}
	var repos []any
	for _, c := range []struct{ name, url, user, pass string }{
		// Team A's credential, for its path on the tenants' Git host.
		{"team-a", s.git.URL + "/team-a", teamAUser, s.teamAPassword},
		// A host-wide credential for another Git host (the company's,
		// at port corpPort) ...
		{"corp", "http://127.0.0.1:" + strconv.Itoa(s.corpPort), corpUser, s.corpPassword},
		// ... and one for a host without a port (port 80).
		{"legacy", "http://127.0.0.1", legacyUser, s.legacyPassword},
	} {
		r, err := cred(c.name, c.url, c.user, c.pass)
		if err != nil {
			return nil, err
		}
		repos = append(repos, r)
	}
	cfg := map[string]any{
		"apiVersion": "config.deputy.dev/v1alpha1",
		"kind":       "DeputyConfiguration",
		"sync": map[string]any{
			"impersonation":         map[string]any{"enabled": true},
			"cacheDir":              s.cacheDir,
			"applicationNamespaces": []any{nsA, nsB},
			"repositories":          repos,
			"leaderElection": map[string]any{
				"leaseNamespace": deputyNamespace, "leaseName": haLease, "identity": identity,
				"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms",
			},
		},
	}
	mergeInto(cfg, extra)
	return yaml.Marshal(cfg)
}

// mergeInto merges src into dst: maps recursively, anything else replaced.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeInto(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// startReplica starts a replica (stopped with SIGTERM, which releases the
// Lease, when the test ends) and waits until it leads.
func (s *attackSuite) startReplica(t *testing.T, extra map[string]any) *syncDeputy {
	t.Helper()
	d, err := s.tryStartReplica(t, extra)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, d.identity)
	return d
}

// tryStartReplica starts a replica and returns the error of a replica that
// does not start (e.g. one that refuses its configuration).
func (s *attackSuite) tryStartReplica(t *testing.T, extra map[string]any) (*syncDeputy, error) {
	t.Helper()
	identity := fmt.Sprintf("attack-%d", s.replicaID.Add(1))
	data, err := s.replicaConfig(identity, extra)
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(s.dir, identity+".yaml")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		return nil, err
	}
	bin, err := framework.DeputyBinary()
	if err != nil {
		return nil, err
	}
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: deputy.CertDir,
		Args: []string{"--config", cfgFile, "--kubeconfig", s.kubeconfig, "--policy", s.policyDir},
		Env:  []string{"POD_NAMESPACE=" + deputyNamespace}})
	if err != nil {
		t.Logf("replica %s did not start; its configuration:\n%s", identity, data)
		return nil, fmt.Errorf("replica %s did not start: %w", identity, err)
	}
	r := &syncDeputy{Deputy: d, identity: identity}
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("replica %s log (tail):\n%s", identity, tail(d.Logs(), 60))
		}
	})
	return r, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// --- Applications ------------------------------------------------------------

// tenantApp is an Application of a tenant.
type tenantApp struct {
	ns, name, project, repoURL, path, dest string
	prune                                  bool
	// helm is spec.source.helm, when set.
	helm map[string]any
}

func (a tenantApp) object(user string) *unstructured.Unstructured {
	// Only fields that are set: the controller clears an operation it
	// finished by comparing it with what it ran, and an explicit
	// "prune: false" would not compare equal.
	sync := map[string]any{}
	if a.prune {
		sync["prune"] = true
	}
	source := map[string]any{"repoURL": a.repoURL, "path": a.path}
	if a.helm != nil {
		source["helm"] = a.helm
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": a.name, "namespace": a.ns, "labels": map[string]any{attackLabel: "true"}},
		"spec": map[string]any{
			"project":     a.project,
			"source":      source,
			"destination": map[string]any{"server": inCluster, "namespace": a.dest},
		},
		"operation": map[string]any{
			"sync":        sync,
			"initiatedBy": map[string]any{"username": user},
		},
	}}
}

// victimApp is an Application of team A, written by its operator.
func victimApp(name, repoURL, path string) tenantApp {
	return tenantApp{ns: nsA, name: name, project: projA, repoURL: repoURL, path: path, dest: nsA}
}

// attackerApp is an Application of team B, written by mallory.
func attackerApp(name, repoURL, path string) tenantApp {
	return tenantApp{ns: nsB, name: name, project: projB, repoURL: repoURL, path: path, dest: nsB}
}

// appsAs returns the Applications API as the given identity: the admin for
// team A's operator, mallory's token for the attacker.
func (s *attackSuite) appsAs(attacker bool) dynamic.NamespaceableResourceInterface {
	c := cp.Admin
	if attacker {
		c = cp.TokenConfig(s.malloryTok)
	}
	return dynamic.NewForConfigOrDie(c).Resource(applicationsGVR)
}

var applicationsGVR = schemaGVR("deputy.dev", "v1alpha1", "applications")

// requestSync creates the Application with a recorded sync operation, or
// records a new operation on an existing one (with its spec replaced); it is
// written by mallory when the Application is team B's. The Application is
// deleted when the test ends.
func (s *attackSuite) requestSync(t *testing.T, a tenantApp) {
	t.Helper()
	s.requestSyncOwned(t, t, a)
}

// requestSyncOwned is requestSync for an Application that outlives the
// subtest t: owner's end deletes it.
func (s *attackSuite) requestSyncOwned(t, owner *testing.T, a tenantApp) {
	t.Helper()
	attacker := a.ns == nsB
	user := "team-a-operator"
	if attacker {
		user = "mallory"
	}
	apps := s.appsAs(attacker).Namespace(a.ns)
	obj := a.object(user)
	cur, err := apps.Get(t.Context(), a.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := apps.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Application %s/%s as %s: %v", a.ns, a.name, user, err)
		}
		owner.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.appsAs(false).Namespace(a.ns).Delete(ctx, a.name, metav1.DeleteOptions{})
			deleteTracked(ctx, a.dest, a.ns+"/"+a.name)
		})
	case err != nil:
		t.Fatal(err)
	default:
		cur.Object["spec"] = obj.Object["spec"]
		cur.Object["operation"] = obj.Object["operation"]
		if _, err := apps.Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update Application %s/%s as %s: %v", a.ns, a.name, user, err)
		}
	}
}

// syncAndWait requests a sync and returns its final state.
func (s *attackSuite) syncAndWait(t *testing.T, a tenantApp) *v1alpha1.OperationState {
	t.Helper()
	s.requestSync(t, a)
	return waitOperationDone(t, a.ns, a.name, 3*time.Minute)
}

// deleteTracked deletes the objects in namespace ns that Application app
// ("ns/name") tracks, as deleting an Application with its resources would,
// so that what one test's sync created does not show up in the next test.
func deleteTracked(ctx context.Context, ns, app string) {
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	tracked := func(m metav1.Object) bool { return m.GetAnnotations()[syncer.TrackingAnnotation] == app }
	if l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range l.Items {
			if tracked(&l.Items[i]) {
				_ = cs.CoreV1().ConfigMaps(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
			}
		}
	}
	if l, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range l.Items {
			if tracked(&l.Items[i]) {
				_ = cs.CoreV1().Secrets(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
			}
		}
	}
	if l, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range l.Items {
			if tracked(&l.Items[i]) {
				_ = cs.RbacV1().RoleBindings(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
			}
		}
	}
	if l, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range l.Items {
			if tracked(&l.Items[i]) {
				_ = cs.RbacV1().Roles(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
			}
		}
	}
}

// ensureVictimSynced syncs team A's Application from its private
// repository once (its mirror is then in the cache), through the running
// replica.
func (s *attackSuite) ensureVictimSynced(t *testing.T) {
	t.Helper()
	s.victimOnce.Lock()
	defer s.victimOnce.Unlock()
	if s.victimDone {
		return
	}
	s.waitGateAllows(t, "system:serviceaccount:"+nsA+":deployer", nsA)
	app := victimApp("victim-app", s.git.RepoURL(victimRepo), "app")
	s.requestSync(t, app)
	st := waitOperationDone(t, nsA, app.name, 3*time.Minute)
	if st.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("team A's own sync from its private repository must succeed: %s", describe(st))
	}
	if _, err := admin(t).CoreV1().Secrets(nsA).Get(t.Context(), victimSecretName, metav1.GetOptions{}); err != nil {
		t.Fatalf("team A's Secret after its sync: %v", err)
	}
	s.victimDone = true
}

// assertNoVictimData fails when anything of team A's private manifests is
// in namespace ns: the Secret or ConfigMap by name, or any Secret or
// ConfigMap holding the victim's password.
func (s *attackSuite) assertNoVictimData(t *testing.T, ns string) {
	t.Helper()
	cs := admin(t)
	if _, err := cs.CoreV1().Secrets(ns).Get(t.Context(), victimSecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team A's Secret %s is in namespace %s (err %v): the attacker read team A's private repository", victimSecretName, ns, err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), victimConfigName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("team A's ConfigMap %s is in namespace %s (err %v)", victimConfigName, ns, err)
	}
	secrets, err := cs.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets.Items {
		for k, v := range sec.Data {
			if strings.Contains(string(v), s.victimSecret) {
				t.Errorf("Secret %s/%s key %s holds team A's password", ns, sec.Name, k)
			}
		}
	}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			if strings.Contains(v, s.victimSecret) {
				t.Errorf("ConfigMap %s/%s key %s holds team A's password", ns, cm.Name, k)
			}
		}
	}
}

// wantRefused checks that an operation ended in Error (or Failed) with
// every substring in its message, and applied nothing.
func wantRefused(t *testing.T, st *v1alpha1.OperationState, substrings ...string) {
	t.Helper()
	if st.Phase != v1alpha1.OperationError && st.Phase != v1alpha1.OperationFailed {
		t.Errorf("phase %s, want Error: %s", st.Phase, describe(st))
		return
	}
	for _, sub := range substrings {
		if !strings.Contains(st.Message, sub) {
			t.Errorf("message lacks %q: %s", sub, describe(st))
		}
	}
	if st.SyncResult != nil {
		for _, r := range st.SyncResult.Resources {
			if r.Status == v1alpha1.ResultCodeSynced {
				t.Errorf("%s %s/%s was applied: %s", r.Kind, r.Namespace, r.Name, describe(st))
			}
		}
	}
}

// --- the gate ----------------------------------------------------------------

// deputyClient is kube-apiserver's client as deputy-system/deputy (a sync
// identity of the main deputy's gate), impersonating saUser ("" for none).
func (s *attackSuite) deputyClient(saUser string) *kubernetes.Clientset {
	c := cp.TokenConfig(s.deputyTok)
	if saUser != "" {
		c.Impersonate = rest.ImpersonationConfig{UserName: saUser}
	}
	return kubernetes.NewForConfigOrDie(c)
}

// waitGateAllows waits until the gate lets deputy-system/deputy act as
// saUser in namespace ns (the main deputy has seen the projects): an
// impersonated list of ConfigMaps, which every project here allows in its
// destination.
func (s *attackSuite) waitGateAllows(t *testing.T, saUser, ns string) {
	t.Helper()
	cs := s.deputyClient(saUser)
	eventually(t, "the gate lets "+deputyUser+" act as "+saUser+" in "+ns, func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err
	})
}

// gateSA creates ServiceAccount name in team B's namespace and makes it
// cluster-admin in RBAC, so that whatever stops it is deputy's gate.
func (s *attackSuite) gateSA(t *testing.T, name string) string {
	t.Helper()
	s.applyT(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: %[1]s, namespace: %[2]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: attack-%[1]s-cluster-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: %[1]s, namespace: %[2]s}]
`, name, nsB))
	return "system:serviceaccount:" + nsB + ":" + name
}

// applyT applies manifests and removes them when the test ends.
func (s *attackSuite) applyT(t *testing.T, manifests string) {
	t.Helper()
	if err := s.apply(t.Context(), manifests); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.remove(ctx, manifests); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

// createT creates the objects of manifests with a plain create (replacing
// existing ones), as kubectl create does, and removes them when the test
// ends.
func (s *attackSuite) createT(t *testing.T, manifests string) {
	t.Helper()
	objs, err := decodeObjects(manifests)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	for _, u := range objs {
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[attackLabel] = "true"
		u.SetLabels(labels)
		ri, err := s.resourceFor(dyn, u)
		if err != nil {
			t.Fatal(err)
		}
		_ = ri.Delete(t.Context(), u.GetName(), metav1.DeleteOptions{})
		if _, err := ri.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.remove(ctx, manifests); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

// gateProject applies a deputy.dev AppProject in deputy's namespace (spec
// as YAML, indented two spaces), removed when the test ends.
func (s *attackSuite) gateProject(t *testing.T, name, spec string) {
	t.Helper()
	s.applyT(t, fmt.Sprintf("apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata: {name: %s, namespace: %s}\nspec:\n%s", name, deputyNamespace, spec))
}

// gateDenied checks that err is kube-apiserver's 403 carrying the gate's
// reason (and every extra substring).
func gateDenied(err error, substrings ...string) error {
	if err == nil {
		return errors.New("allowed, want 403 from deputy's impersonation gate")
	}
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("want 403 from deputy's impersonation gate, got %v", err)
	}
	for _, sub := range append([]string{"deputy impersonation gate"}, substrings...) {
		if !strings.Contains(err.Error(), sub) {
			return fmt.Errorf("403 without %q: %v", sub, err)
		}
	}
	return nil
}

// notForbidden checks that kube-apiserver let the request through
// authorization (any other outcome, e.g. 404, is fine).
func notForbidden(err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("403, want the request authorized: %v", err)
	}
	return nil
}

// sar asks kube-apiserver's SubjectAccessReview API (the same authorizer
// chain as real requests) about user.
func sar(t *testing.T, user string, groups []string, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	r, err := admin(t).AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: append(groups, "system:authenticated"), ResourceAttributes: ra, NonResourceAttributes: nra},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// withGateConfig restarts the main deputy (kube-apiserver's authorization
// webhook) with the e2e configuration changed by mutate, and restores it
// when the test ends. A deputy that refuses the configuration fails the
// test with its log (today's deputy refuses the fields it does not know).
func withGateConfig(t *testing.T, mutate func(cfg map[string]any)) {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(deputyConfig(true)), &cfg); err != nil {
		t.Fatal(err)
	}
	mutate(cfg)
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(work, "deputy-attack.yaml")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreDeputy(t) })
	d, err := deputy.Restart(clusterModeArgs(cfgFile)...)
	if err != nil {
		t.Fatalf("deputy with the configuration\n%s\ndid not start: %v", data, err)
	}
	deputy = d
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := deputy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, deputy.Logs())
	}
}

// impersonation returns the gate's part of the e2e configuration.
func impersonation(cfg map[string]any) map[string]any {
	return cfg["authorization"].(map[string]any)["impersonation"].(map[string]any)
}

// --- other servers -------------------------------------------------------------

// internalEndpoint stands for something only deputy's Pod can reach (a
// cloud metadata service, an internal API): it serves a ConfigMap with a
// secret for any *.yaml path and counts every TCP connection it accepts,
// whatever the protocol.
type internalEndpoint struct {
	URL    string
	Port   int
	Secret string
	ln     *countingListener
	srv    *http.Server
	// slow paths (under /slow/) answer with headers and a first line,
	// then never finish.
	closing chan struct{}
}

type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func startInternalEndpoint(t *testing.T) *internalEndpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &internalEndpoint{ln: &countingListener{Listener: ln}, Secret: "internal-only-" + randomString(), closing: make(chan struct{})}
	e.Port = ln.Addr().(*net.TCPAddr).Port
	e.URL = "http://" + ln.Addr().String()
	e.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/slow/"):
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write([]byte("apiVersion: v1\n"))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-e.closing:
			}
		case strings.HasPrefix(r.URL.Path, "/big/"):
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write([]byte(cmYAML("internal-big", "k", "v")))
			line := []byte("# " + strings.Repeat("padding ", 7) + "\n")
			for i := 0; i < (4<<20)/len(line); i++ {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		case strings.HasSuffix(r.URL.Path, ".yaml") || strings.HasSuffix(r.URL.Path, ".env"):
			w.Header().Set("Content-Type", "application/yaml")
			if strings.HasSuffix(r.URL.Path, ".env") {
				_, _ = fmt.Fprintf(w, "token=%s\n", e.Secret)
				return
			}
			_, _ = w.Write([]byte(cmYAML("internal-metadata", "token", e.Secret)))
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = e.srv.Serve(e.ln) }()
	t.Cleanup(func() {
		close(e.closing)
		_ = e.srv.Close()
	})
	return e
}

// Connections is how many TCP connections the endpoint accepted.
func (e *internalEndpoint) Connections() int64 { return e.ln.n.Load() }

// --- small helpers -------------------------------------------------------------

// eventuallyWithin is eventually with its own bound, for changes that the
// fixed deputy makes within a few seconds.
func eventuallyWithin(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) || t.Context().Err() != nil {
			t.Fatalf("%s: still failing after %s: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func schemaGVR(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

// computeTodayCacheDir is where today's deputy keeps the mirror of repoURL
// (cacheDir/repos/ + the first 10 bytes of the SHA-256 of the URL lower
// cased without ".git", hex): anyone can compute it.
func computeTodayCacheDir(cacheDir, repoURL string) string {
	n := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(repoURL)), ".git")
	if u, err := url.Parse(n); err == nil {
		n = u.String()
	}
	sum := sha256.Sum256([]byte(n))
	return filepath.Join(cacheDir, "repos", hex.EncodeToString(sum[:10]))
}

// findMirrors returns the bare repositories under dir whose configuration
// names a URL containing urlPart (every bare repository when urlPart is "").
func findMirrors(dir, urlPart string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if fi, err := os.Stat(filepath.Join(p, "HEAD")); err == nil && !fi.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "objects")); err == nil {
				cfg, _ := os.ReadFile(filepath.Join(p, "config"))
				if urlPart == "" || bytes.Contains(cfg, []byte(urlPart)) {
					out = append(out, p)
				}
				return filepath.SkipDir
			}
		}
		return nil
	})
	return out
}
