package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// decisionLine is the part of a decision log line the test reads.
type decisionLine struct {
	Msg        string   `json:"msg"`
	RequestID  string   `json:"requestID"`
	User       string   `json:"user"`
	Groups     []string `json:"groups"`
	Verb       string   `json:"verb"`
	Resource   string   `json:"resource"`
	Namespace  string   `json:"namespace"`
	Decision   string   `json:"decision"`
	Authorizer string   `json:"authorizer"`
	Generation string   `json:"policyGeneration"`
}

// decisionLines returns the decision log lines of a deputy's output (its
// other log lines are text).
func decisionLines(logs string) []decisionLine {
	var out []decisionLine
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "{") || !strings.Contains(l, `"msg":"decision"`) {
			continue
		}
		var d decisionLine
		if json.Unmarshal([]byte(l), &d) == nil {
			out = append(out, d)
		}
	}
	return out
}

// TestDecisionLogDenied: with logging.decisions denied, kube-apiserver's
// SubjectAccessReviews for alice's requests reach deputy; the one deputy
// has no opinion on (list pods in team-b) is logged with alice, the verb,
// the resource and the namespace; the allowed one (list pods in team-a) is
// not; and her bearer token never appears in deputy's output.
func TestDecisionLogDenied(t *testing.T) {
	cfgFile := filepath.Join(work, "deputy.yaml")
	if err := os.WriteFile(cfgFile, []byte(deputyConfig(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := deputy.Restart(append(clusterModeArgs(cfgFile), "--log-decisions", "denied")...)
	if err != nil {
		t.Fatal(err)
	}
	deputy = d
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of deputy with decision logs:\n%s", deputy.Logs())
		}
		restoreDeputy(t)
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := deputy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, deputy.Logs())
	}

	alice := kubernetes.NewForConfigOrDie(cp.TokenConfig(aliceToken))
	// The apiserver caches answers for 1s (--authorized-ttl,
	// --unauthorized-ttl): after a restart the first call may still be a
	// cached one, so ask until deputy has seen both.
	var denied *decisionLine
	deadline := time.Now().Add(30 * time.Second)
	for denied == nil && time.Now().Before(deadline) {
		if _, err := alice.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("alice lists pods in team-a: %v", err)
		}
		if _, err := alice.CoreV1().Pods("team-b").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("alice lists pods in team-b: %v, want forbidden", err)
		}
		time.Sleep(500 * time.Millisecond)
		for _, l := range decisionLines(deputy.Logs()) {
			if l.User == "alice" && l.Verb == "list" && l.Resource == "pods" && l.Namespace == "team-b" {
				denied = &l
				break
			}
		}
	}
	if denied == nil {
		t.Fatalf("no decision line for alice's list of pods in team-b; decision lines:\n%v", decisionLines(deputy.Logs()))
	}
	if denied.Decision != "no_opinion" || denied.Authorizer != "none" || denied.RequestID == "" || denied.Generation == "" ||
		!strings.Contains(strings.Join(denied.Groups, ","), "team-a-devs") {
		t.Errorf("decision line %+v: want no_opinion by none with a request ID, a policy generation and alice's groups", *denied)
	}
	for _, l := range decisionLines(deputy.Logs()) {
		if l.Decision == "allow" {
			t.Errorf("mode denied logged an allow: %+v", l)
		}
		if l.User == "alice" && l.Namespace == "team-a" && l.Resource == "pods" && l.Verb == "list" {
			t.Errorf("alice's allowed list of pods in team-a was logged: %+v", l)
		}
	}
	if strings.Contains(deputy.Logs(), aliceToken) {
		t.Errorf("deputy's output holds alice's token %q", aliceToken)
	}
}
