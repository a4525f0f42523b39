package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func TestATokenOnlyDeputyKnowsAuthenticates(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(cp.TokenConfig(aliceToken))
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with alice's token: %v", err)
	}
	u := review.Status.UserInfo
	if u.Username != "alice" || u.UID != "alice-uid" {
		t.Errorf("user = %q uid %q, want alice / alice-uid (from deputy's token file)", u.Username, u.UID)
	}
	for _, g := range []string{"team-a-devs", "e2e", "system:authenticated"} {
		if !contains(u.Groups, g) {
			t.Errorf("groups %v lack %q", u.Groups, g)
		}
	}

	t.Run("an unknown token is unauthorized", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(cp.TokenConfig("not-a-known-token"))
		_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("err = %v, want 401 Unauthorized", err)
		}
	})
}

func TestAliceListsPodsInTeamAOnly(t *testing.T) {
	ensureNamespace(t, "team-a")
	ensureNamespace(t, "team-b")
	cs := kubernetes.NewForConfigOrDie(cp.TokenConfig(aliceToken))

	if _, err := cs.CoreV1().Pods("team-a").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("alice list pods in team-a: %v, want 200 (deputy's RoleBinding alice-pod-reader allows)", err)
	}
	_, err := cs.CoreV1().Pods("team-b").List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("alice list pods in team-b: %v, want 403", err)
	}
	if !strings.Contains(err.Error(), `User "alice" cannot list resource "pods"`) {
		t.Errorf("403 message %q does not name alice and the request", err)
	}
	if _, err := cs.CoreV1().Pods("team-a").Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice create pod in team-a: %v, want 403 (the rule grants get and list only)", err)
	}
}

// kubectl auth can-i as an administrator impersonating alice goes through
// deputy too (scenario 2).
func TestKubectlAuthCanIReflectsDeputysPolicy(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"auth", "can-i", "list", "pods", "-n", "team-a", "--as", "alice"}, "yes"},
		{[]string{"auth", "can-i", "list", "pods", "-n", "team-b", "--as", "alice"}, "no"},
		{[]string{"auth", "can-i", "delete", "pods", "-n", "team-a", "--as", "alice"}, "no"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, stderr, _ := cp.Kubectl(t.Context(), nil, tc.args...)
			if got := strings.TrimSpace(out); got != tc.want {
				t.Errorf("kubectl %v = %q (stderr %q), want %q", tc.args, got, stderr, tc.want)
			}
		})
	}
}

// A broken policy file keeps the last good snapshot serving and turns
// /readyz red naming the file; fixing it turns readiness green again.
func TestBrokenPolicyFileKeepsLastGoodPolicy(t *testing.T) {
	client, err := deputy.Client(false)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(extraPolicy, "broken.yaml")
	if err := os.WriteFile(broken, []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: x\nrules:\n- verbs: [get]\n  resourcez: [pods]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := waitReadyz(t, client, http.StatusServiceUnavailable)
	if !strings.Contains(body, "broken.yaml: document 1") || !strings.Contains(body, "resourcez") {
		t.Errorf("/readyz does not name the file, document and field:\n%s", body)
	}
	cs := kubernetes.NewForConfigOrDie(cp.TokenConfig(aliceToken))
	if _, err := cs.CoreV1().Pods("team-a").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("with a broken file, the last good policy must keep serving: %v", err)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, client, http.StatusOK)
}

func waitReadyz(t *testing.T, c *http.Client, want int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		resp, err := c.Get(deputy.URL + "/readyz")
		if err == nil {
			b := make([]byte, 64<<10)
			n, _ := resp.Body.Read(b)
			resp.Body.Close()
			last = string(b[:n])
			if resp.StatusCode == want {
				return last
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("/readyz did not answer %d; last body:\n%s", want, last)
	return ""
}

func TestDeputyNeverLogsTheToken(t *testing.T) {
	if strings.Contains(deputy.Logs(), aliceToken) {
		t.Error("deputy's log contains alice's token")
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
