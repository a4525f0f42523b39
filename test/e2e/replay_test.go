package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/manifests"
	"deputy.dev/deputy/test/framework"
)

// The replay test's users: every request they make is audited (main_test.go).
const (
	replayAnn    = "replay-ann"
	replayBen    = "replay-ben"
	replayTarget = "replay-target"
	replayNS     = "replay-a"
	replaySA     = "system:serviceaccount:replay-a:replay-sa"
)

// replayPolicy is the policy in force; edited removes ann's list of
// configmaps and gives ben list of pods, the edit the test replays.
func replayPolicy(edited bool) string {
	annVerbs, benRole := `["get", "list", "create", "delete"]`, ""
	if edited {
		annVerbs = `["get", "create", "delete"]`
		benRole = `---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: replay-pod-lister, namespace: replay-a}
rules:
- {apiGroups: [""], resources: [pods], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: replay-ben-pods, namespace: replay-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: replay-pod-lister}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: replay-ben}
`
	}
	return `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: replay-cm-editor, namespace: replay-a}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: ` + annVerbs + `}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: replay-ann-cm, namespace: replay-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: replay-cm-editor}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: replay-ann}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: replay-cm-reader, namespace: replay-a}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: replay-readers, namespace: replay-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: replay-cm-reader}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: replay-target}
- {kind: ServiceAccount, name: replay-sa, namespace: replay-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: replay-impersonator}
rules:
- {apiGroups: [""], resources: [users], verbs: [impersonate], resourceNames: [replay-target]}
- {apiGroups: [""], resources: [groups], verbs: [impersonate], resourceNames: [replay-imp-group]}
- {apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate], resourceNames: [replay-sa]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: replay-ann-impersonates}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: replay-impersonator}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: replay-ann}
` + benRole
}

// driven is one request the test made, and how kube-apiserver answered.
type driven struct {
	user, impersonator, verb, resource string
	allowed                            bool
}

// replayReport is the part of `deputy replay -o json` the test reads.
type replayReport struct {
	Totals struct {
		EventsRead, OtherStages, Unrebuildable, NotSentToDeputy, DecidedOutsideDeputy, Replayed, Unchanged, NewlyDenied, NewlyAllowed int64
	} `json:"totals"`
	Unrebuildable []struct {
		Reason string `json:"reason"`
		Count  int64  `json:"count"`
	} `json:"unrebuildable"`
	NewlyDenied  []replayGroup `json:"newlyDenied"`
	NewlyAllowed []replayGroup `json:"newlyAllowed"`
}

type replayGroup struct {
	User         string `json:"user"`
	Impersonator string `json:"impersonator"`
	Verb         string `json:"verb"`
	Resource     string `json:"resource"`
	Count        int64  `json:"count"`
	Examples     []struct {
		AuditID string `json:"auditID"`
	} `json:"examples"`
}

// TestReplayAuditLog drives traffic as several users through the real
// kube-apiserver with deputy as its authorizer, then replays the audit log
// with deputy replay: against the policy in force nothing changes; against
// an edited policy exactly the requests the edit affects change.
func TestReplayAuditLog(t *testing.T) {
	ensureNamespace(t, replayNS)
	policyFile := filepath.Join(extraPolicy, "replay.yaml")
	if err := os.WriteFile(policyFile, []byte(replayPolicy(false)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(policyFile) })
	eventually(t, "deputy loads the replay policy", func() error {
		rev, err := admin(t).AuthorizationV1().SubjectAccessReviews().Create(t.Context(),
			sarFor(replayAnn, "list", "", "configmaps", replayNS, ""), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !rev.Status.Allowed {
			return fmt.Errorf("not yet allowed: %+v", rev.Status)
		}
		return nil
	})
	start := time.Now()
	user := func(name string, groups ...string) *rest.Config {
		u, err := cp.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u.Config()
	}
	annCfg, benCfg := user(replayAnn, "replay-team"), user(replayBen)
	ann, ben := kubernetes.NewForConfigOrDie(annCfg), kubernetes.NewForConfigOrDie(benCfg)
	asTarget := impersonating(annCfg, replayTarget, "replay-imp-group")
	asSA := impersonating(annCfg, replaySA)
	benAsTarget := impersonating(benCfg, replayTarget)

	var log []driven
	do := func(u, imp, verb, resource string, err error) {
		log = append(log, driven{user: u, impersonator: imp, verb: verb, resource: resource, allowed: err == nil})
	}
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "replay-cm"}}
	_, err := ann.CoreV1().ConfigMaps(replayNS).Create(ctx, cm, metav1.CreateOptions{})
	do(replayAnn, "", "create", "configmaps", err)
	for range 3 {
		_, err := ann.CoreV1().ConfigMaps(replayNS).List(ctx, metav1.ListOptions{})
		do(replayAnn, "", "list", "configmaps", err)
	}
	for range 2 {
		_, err := ann.CoreV1().ConfigMaps(replayNS).Get(ctx, "replay-cm", metav1.GetOptions{})
		do(replayAnn, "", "get", "configmaps", err)
	}
	err = ann.CoreV1().ConfigMaps("default").Delete(ctx, "replay-nothing", metav1.DeleteOptions{})
	do(replayAnn, "", "delete", "configmaps", err)
	for range 2 {
		_, err := ben.CoreV1().Pods(replayNS).List(ctx, metav1.ListOptions{})
		do(replayBen, "", "list", "pods", err)
	}
	for _, path := range []string{"/apis", "/api", "/version"} {
		err := ben.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).Error()
		do(replayBen, "", "get", path, err)
	}
	for range 2 {
		_, err := asTarget.CoreV1().ConfigMaps(replayNS).List(ctx, metav1.ListOptions{})
		do(replayTarget, replayAnn, "list", "configmaps", err)
	}
	_, err = asSA.CoreV1().ConfigMaps(replayNS).Get(ctx, "replay-cm", metav1.GetOptions{})
	do(replaySA, replayAnn, "get", "configmaps", err)
	_, err = benAsTarget.CoreV1().ConfigMaps(replayNS).List(ctx, metav1.ListOptions{})
	deniedImpersonation := err != nil
	if !deniedImpersonation {
		t.Fatalf("ben may impersonate %s: the test's policy is not in force", replayTarget)
	}
	want := map[string]bool{"replay-ann create configmaps": true, "replay-ann list configmaps": true, "replay-ann get configmaps": true,
		"replay-ann delete configmaps": false, "replay-ben list pods": false, "replay-ben get /apis": true, "replay-ben get /api": true,
		"replay-ben get /version": true, "replay-target list configmaps": true, replaySA + " get configmaps": true}
	for _, d := range log {
		if w := want[d.user+" "+d.verb+" "+d.resource]; w != d.allowed {
			t.Fatalf("%+v: kube-apiserver allowed %t, the test's policy means %t", d, d.allowed, w)
		}
	}

	logFile := filepath.Join(t.TempDir(), "replay-audit.log")
	events := len(log) + 1 // and ben's denied impersonation
	eventually(t, "the audit log has every request", func() error {
		n, err := copyAuditEvents(auditLog, logFile, start)
		if err == nil && n < events {
			err = fmt.Errorf("%d of %d events", n, events)
		}
		return err
	})
	if data, err := os.ReadFile(logFile); err == nil {
		t.Logf("the test's audit events:\n%s", data)
	}

	authzConfig := filepath.Join(cp.ConfigDir, manifests.AuthorizationConfigFile)
	current := []string{"--policy", filepath.Join("testdata", "policy"), "--policy", extraPolicy}
	common := []string{"replay", "--audit-log", logFile, "--config", filepath.Join(work, "deputy.yaml"),
		"--authorization-config", authzConfig, "--kubeconfig", cp.AdminKubeconfig, "-o", "json"}
	run := func(args ...string) (replayReport, int) {
		t.Helper()
		cmd := exec.Command(deputy.Bin, append(append([]string(nil), common...), args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var rep replayReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("deputy replay %v exited %d: -o json does not parse: %v\n%s\n%s", args, code, err, out, stderr.String())
		}
		t.Logf("deputy replay %v: exit %d\n%s", args, code, out)
		return rep, code
	}
	checkTotals := func(rep replayReport) {
		t.Helper()
		tt := rep.Totals
		if tt.EventsRead != int64(events) || tt.OtherStages != 0 {
			t.Errorf("events read %d (other stages %d), want the %d requests the test made", tt.EventsRead, tt.OtherStages, events)
		}
		// ben's denied impersonation: kube-apiserver records neither a
		// decision nor the target it refused.
		if tt.Unrebuildable != 1 || len(rep.Unrebuildable) != 1 || !strings.HasPrefix(rep.Unrebuildable[0].Reason, "forbidden before authorization") {
			t.Errorf("unrebuildable %d %+v, want ben's denied impersonation only", tt.Unrebuildable, rep.Unrebuildable)
		}
		// /version is a health path the deputy webhook never receives.
		if tt.NotSentToDeputy != 1 || tt.DecidedOutsideDeputy != 0 {
			t.Errorf("not sent to deputy %d, decided outside %d, want 1 (/version) and 0", tt.NotSentToDeputy, tt.DecidedOutsideDeputy)
		}
		if tt.Replayed != int64(len(log)-1) || tt.Replayed != tt.Unchanged+tt.NewlyDenied+tt.NewlyAllowed {
			t.Errorf("replayed %d, want %d = unchanged + newly denied + newly allowed", tt.Replayed, len(log)-1)
		}
	}

	t.Run("against the policy in force nothing changes", func(t *testing.T) {
		rep, code := run(append(current, "--fail-on", "any")...)
		checkTotals(rep)
		if code != 0 || rep.Totals.NewlyDenied != 0 || rep.Totals.NewlyAllowed != 0 {
			t.Errorf("exit %d, newly denied %+v, newly allowed %+v: want none", code, rep.NewlyDenied, rep.NewlyAllowed)
		}
	})

	edited := t.TempDir()
	if err := os.WriteFile(filepath.Join(edited, "replay.yaml"), []byte(replayPolicy(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	candidate := []string{"--policy", filepath.Join("testdata", "policy"), "--policy", edited}
	// What the edit changes, from the test's own list: ann loses list of
	// configmaps (not when impersonating), ben gains list of pods.
	after := func(d driven) bool {
		switch {
		case d.impersonator == "" && d.user == replayAnn && d.verb == "list" && d.resource == "configmaps":
			return false
		case d.impersonator == "" && d.user == replayBen && d.verb == "list" && d.resource == "pods":
			return true
		}
		return d.allowed
	}
	wantDenied, wantAllowed := map[string]int64{}, map[string]int64{}
	for _, d := range log {
		key := d.user + "|" + d.impersonator + "|" + d.verb + "|" + d.resource
		switch a := after(d); {
		case d.allowed && !a:
			wantDenied[key]++
		case !d.allowed && a:
			wantAllowed[key]++
		}
	}
	if len(wantDenied) == 0 || len(wantAllowed) == 0 {
		t.Fatalf("the edit changes nothing the test drove: %v %v", wantDenied, wantAllowed)
	}
	groups := func(gs []replayGroup) map[string]int64 {
		m := map[string]int64{}
		for _, g := range gs {
			m[g.User+"|"+g.Impersonator+"|"+g.Verb+"|"+g.Resource] += g.Count
			if len(g.Examples) == 0 || g.Examples[0].AuditID == "" {
				t.Errorf("group %+v has no example event", g)
			}
		}
		return m
	}
	check := func(t *testing.T, rep replayReport) {
		checkTotals(rep)
		if got := groups(rep.NewlyDenied); !equalCounts(got, wantDenied) {
			t.Errorf("newly denied %v, want %v", got, wantDenied)
		}
		if got := groups(rep.NewlyAllowed); !equalCounts(got, wantAllowed) {
			t.Errorf("newly allowed %v, want %v", got, wantAllowed)
		}
	}
	t.Run("against an edited policy exactly the edit's requests change", func(t *testing.T) {
		rep, code := run(append(candidate, "--fail-on", "newly-denied")...)
		check(t, rep)
		if code != 1 {
			t.Errorf("--fail-on newly-denied exited %d, want 1", code)
		}
	})
	t.Run("the policy in force as baseline gives the same answer", func(t *testing.T) {
		args := append([]string{}, candidate...)
		for i := 1; i < len(current); i += 2 {
			args = append(args, "--baseline", current[i])
		}
		rep, code := run(args...)
		check(t, rep)
		if code != 0 {
			t.Errorf("without --fail-on: exit %d, want 0", code)
		}
	})
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// copyAuditEvents copies the events of the replay test's users received
// since start from the shared audit log to out, and counts them.
func copyAuditEvents(from, out string, start time.Time) (int, error) {
	f, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for s.Scan() {
		var ev framework.AuditEvent
		if err := json.Unmarshal(s.Bytes(), &ev); err != nil {
			return 0, err
		}
		if (ev.User.Username == replayAnn || ev.User.Username == replayBen) && !ev.RequestReceivedTimestamp.Before(start.Add(-time.Second)) {
			lines = append(lines, s.Text())
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return len(lines), os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}
