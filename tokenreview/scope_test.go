package tokenreview_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/tokenreview"
)

func app(ns, name, project string) *v1alpha1.Application {
	return &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.ApplicationSpec{Project: project}}
}

// projectOf is the AppProject app resolves to when projects live next to
// their Applications.
func projectOf(a *v1alpha1.Application) *v1alpha1.AppProject {
	if a == nil {
		return nil
	}
	return &v1alpha1.AppProject{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Spec.Project}}
}

func TestCheckProjectScope(t *testing.T) {
	projectUser := func(extra map[string][]string) user.Info {
		return &user.DefaultInfo{Name: "deputy:project:team-a/alpha:deployer", Extra: extra}
	}
	alpha := map[string][]string{tokenreview.ExtraProject: {"team-a/alpha"}, tokenreview.ExtraProjectRole: {"deployer"}}
	tests := []struct {
		name      string
		user      user.Info
		app       *v1alpha1.Application
		project   *v1alpha1.AppProject // default: projectOf(app)
		noProject bool
		wantErr   string
	}{
		{name: "a user without a project is not restricted", user: &user.DefaultInfo{Name: "alice"}, app: app("team-b", "web", "beta")},
		{name: "a project token may act on its project's Application", user: projectUser(alpha), app: app("team-a", "web", "alpha")},
		{name: "a project token may not act on another project's Application", user: projectUser(alpha), app: app("team-b", "web", "beta"),
			wantErr: `the project token of AppProject "team-a/alpha" may only act on Applications of that project; Application "team-b/web" belongs to AppProject "team-b/beta"`},
		{name: "a project of the same name in another namespace is another project", user: projectUser(alpha), app: app("team-b", "web", "alpha"),
			wantErr: `belongs to AppProject "team-b/alpha"`},
		{name: "an unknown Application is refused", user: projectUser(alpha), app: nil, wantErr: "may only act on Applications of that project"},
		{name: "an Application elsewhere that uses the project is in scope", user: projectUser(alpha), app: app("apps", "web", "alpha"),
			project: &v1alpha1.AppProject{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alpha"}}},
		{name: "an Application that may use no project is refused", user: projectUser(alpha), app: app("team-a", "web", "alpha"), noProject: true,
			wantErr: `names AppProject "alpha", which it may not use`},
		{name: "a malformed project extra matches nothing", user: projectUser(map[string][]string{tokenreview.ExtraProject: {"alpha"}}),
			app: app("team-a", "web", "alpha"), wantErr: "malformed"},
		{name: "two project values match nothing", user: projectUser(map[string][]string{tokenreview.ExtraProject: {"team-a/alpha", "team-b/beta"}}),
			app: app("team-a", "web", "alpha"), wantErr: "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			project := tc.project
			if project == nil && !tc.noProject {
				project = projectOf(tc.app)
			}
			err := tokenreview.CheckProjectScope(tc.user, tc.app, project)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("CheckProjectScope() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("CheckProjectScope() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	t.Run("ProjectOf returns the project and role", func(t *testing.T) {
		id, ok := tokenreview.ProjectOf(projectUser(alpha))
		if !ok || id != (tokenreview.ProjectIdentity{Namespace: "team-a", Name: "alpha", Role: "deployer"}) || id.String() != "team-a/alpha" {
			t.Errorf("ProjectOf() = %+v, %t", id, ok)
		}
		if _, ok := tokenreview.ProjectOf(nil); ok {
			t.Error("ProjectOf(nil) is restricted")
		}
	})
}

func TestProjectRoleLookups(t *testing.T) {
	proj := func(group, ns, name string, roles ...v1alpha1.ProjectRole) policy.Project {
		return policy.Project{Group: group, Object: &v1alpha1.AppProject{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.AppProjectSpec{Roles: roles}}}
	}
	state := &policy.ClusterState{Projects: []policy.Project{
		proj("argoproj.io", "argocd", "alpha", v1alpha1.ProjectRole{Name: "deployer", Groups: []string{"argo"}}),
		proj(v1alpha1.Group, "team-a", "alpha", v1alpha1.ProjectRole{Name: "deployer", Groups: []string{"cluster-deployers"}}),
	}}
	cluster := tokenreview.ClusterProjectRoles(func() *policy.ClusterState { return state })
	none := tokenreview.ClusterProjectRoles(func() *policy.ClusterState { return nil })
	snapshot := tokenreview.SnapshotProjectRoles(func() *policy.Snapshot { return nil })
	first := tokenreview.FirstProjectRoles(snapshot, nil, cluster)

	for _, tc := range []struct {
		name           string
		lookup         tokenreview.ProjectRoleLookup
		ns, proj, role string
		want           bool
	}{
		{"a deputy.dev project's role is found", cluster, "team-a", "alpha", "deployer", true},
		{"an argoproj.io project is not a deputy project", cluster, "argocd", "alpha", "deployer", false},
		{"a missing role is not found", cluster, "team-a", "alpha", "admin", false},
		{"nothing is found before the cluster is read", none, "team-a", "alpha", "deployer", false},
		{"nothing is found before a policy is loaded", snapshot, "team-a", "alpha", "deployer", false},
		{"the first lookup that finds the role answers", first, "team-a", "alpha", "deployer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.lookup(tc.ns, tc.proj, tc.role); got != tc.want {
				t.Errorf("lookup(%s/%s, %s) = %t, want %t", tc.ns, tc.proj, tc.role, got, tc.want)
			}
		})
	}
}

// A project admin may write any group into spec.roles[].groups (Argo CD's
// OIDC groups granted the role); the role's existing tokens keep
// authenticating with the identity derived from the project and role alone.
func TestProjectTokenGroupsNeverComeFromTheRole(t *testing.T) {
	k := newTestKey(t)
	vk, err := tokenreview.ParseVerificationKey(k.publicPEM)
	if err != nil {
		t.Fatal(err)
	}
	var state atomic.Pointer[policy.ClusterState]
	setRoles := func(roles ...v1alpha1.ProjectRole) {
		state.Store(&policy.ClusterState{Projects: []policy.Project{{Group: v1alpha1.Group, Object: &v1alpha1.AppProject{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alpha"}, Spec: v1alpha1.AppProjectSpec{Roles: roles}}}}})
	}
	var reasons []string
	a, err := tokenreview.NewProjectTokenAuthenticator(tokenreview.ProjectTokenOptions{
		Issuer: testProjectIssuer, Keys: []*tokenreview.VerificationKey{vk}, APIAudiences: apiAudiences,
		Roles:    tokenreview.ClusterProjectRoles(state.Load),
		Rejected: func(r string) { reasons = append(reasons, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	deployer, _ := issue(t, k, alphaDeployer(), time.Now())
	reviewer := tokenreview.NewReviewer(a, apiAudiences)
	wantGroups := []string{"deputy:project:team-a/alpha"}

	for _, tc := range []struct {
		name  string
		roles []v1alpha1.ProjectRole
		want  bool
	}{
		{"a role naming kubeadm:cluster-admins authenticates with exactly the project group",
			[]v1alpha1.ProjectRole{{Name: "deployer", Groups: []string{"kubeadm:cluster-admins"}}}, true},
		{"a role whose groups were changed after the token was issued still carries only the project group",
			[]v1alpha1.ProjectRole{{Name: "deployer", Groups: []string{"system:masters", "deputy:project:team-b/beta", "team-a-deployers"}}}, true},
		{"a role without groups carries the project group",
			[]v1alpha1.ProjectRole{{Name: "deployer"}}, true},
		{"another role's groups do not reach the token",
			[]v1alpha1.ProjectRole{{Name: "admin", Groups: []string{"kubeadm:cluster-admins"}}, {Name: "deployer"}}, true},
		{"a deleted role stops the token",
			[]v1alpha1.ProjectRole{{Name: "admin", Groups: []string{"kubeadm:cluster-admins"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setRoles(tc.roles...)
			reasons = nil
			status, err := reviewer.Review(t.Context(), authenticationv1.TokenReviewSpec{Token: deployer})
			if err != nil {
				t.Fatalf("Review() error = %v", err)
			}
			if status.Authenticated != tc.want || status.Error != "" {
				t.Fatalf("authenticated = %t (error %q, rejections %v), want %t", status.Authenticated, status.Error, reasons, tc.want)
			}
			if !tc.want {
				if !slices.Equal(reasons, []string{tokenreview.ProjectRejectNoRole}) {
					t.Errorf("rejections %v, want [%s]", reasons, tokenreview.ProjectRejectNoRole)
				}
				return
			}
			if status.User.Username != "deputy:project:team-a/alpha:deployer" || !slices.Equal(status.User.Groups, wantGroups) {
				t.Errorf("user %q groups %q, want deputy:project:team-a/alpha:deployer with exactly %q", status.User.Username, status.User.Groups, wantGroups)
			}
		})
	}
}

func TestRevocationListReloads(t *testing.T) {
	k := newTestKey(t)
	dir := t.TempDir()
	keyFile := writeFile(t, dir, "key.pem", k.privatePEM)
	revFile := writeFile(t, dir, "revoked.txt", []byte("# revoked project tokens\nsome-old-id  # leaked in CI\n"))
	reg := prometheus.NewRegistry()
	chains := mustChains(t, chainsConfig{keyFile: keyFile, revocationFile: revFile, registry: reg}, nil)
	tok, info := issue(t, k, alphaDeployer(), time.Now())
	reviewer := tokenreview.NewReviewer(chains.Webhook, apiAudiences)
	review := func() authenticationv1.TokenReviewStatus {
		st, err := reviewer.Review(t.Context(), authenticationv1.TokenReviewSpec{Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	if st := review(); !st.Authenticated || st.User.Username != "deputy:project:team-a/alpha:deployer" || st.Error != "" {
		t.Fatalf("before revocation: %+v, want authenticated", st)
	}
	if err := os.WriteFile(revFile, []byte("some-old-id\n"+info.ID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for review().Authenticated {
		if time.Now().After(deadline) {
			t.Fatal("the revoked token still authenticates 5s after the revocation file changed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := review(); st.Error != "" {
		t.Errorf("a revoked token is not a fault: status.error = %q", st.Error)
	}
	if got := metricValue(t, reg, "deputy_project_token_rejections_total", map[string]string{"reason": "revoked"}); got < 1 {
		t.Errorf("rejections{reason=revoked} = %v, want >= 1", got)
	}

	t.Run("a revocation file that disappears keeps the last list", func(t *testing.T) {
		if err := os.Remove(revFile); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if review().Authenticated {
			t.Error("the revoked token authenticates again after the revocation file was removed")
		}
		if !chains.Revocations.Revoked(info.ID) || !chains.Revocations.Revoked("some-old-id") || chains.Revocations.Revoked("#") {
			t.Errorf("revocation list lost entries or parsed comments (%d entries)", chains.Revocations.Len())
		}
	})
}

// A line the scanner cannot hold must not truncate the list: every entry
// after it would silently stop being revoked.
func TestRevocationListRefusesAnOverlongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revoked.txt")
	data := "first-id\n# " + strings.Repeat("x", 2<<20) + "\nrevoked-after-long-line\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tokenreview.LoadRevocationList(path); err == nil || !strings.Contains(err.Error(), "revocationFile") {
		t.Fatalf("LoadRevocationList() error = %v, want one naming revocationFile", err)
	}
	if err := os.WriteFile(path, []byte("first-id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := tokenreview.LoadRevocationList(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := list.Reload(); err == nil {
		t.Error("Reload() of an overlong line: no error")
	}
	if !list.Revoked("first-id") {
		t.Error("a failed reload dropped the last good list")
	}
}
