package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// replayLog is the real kube-apiserver 1.37 log of the e2e test: replay-ann
// lists configmaps in replay-a three times, allowed by RBAC (cluster or
// policy) when it was recorded.
const replayLog = "../../replay/testdata/kube-apiserver-1.37.log"

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	grant := filepath.Join(dir, "grant.yaml")
	if err := os.WriteFile(grant, []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm, namespace: replay-a}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ann, namespace: replay-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: replay-ann}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := execute(t.Context(), append([]string{"replay"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	t.Run("README: the policy in force replays unchanged, the candidate changes exactly its edit", func(t *testing.T) {
		totals := func(policy string) map[string]int64 {
			code, out, errs := run("--audit-log", replayLog, "--policy", policy, "-o", "json")
			if code != 0 {
				t.Fatalf("--policy %s: exit %d\n%s", policy, code, errs)
			}
			var rep struct{ Totals map[string]int64 }
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			return rep.Totals
		}
		if got := totals("../../replay/testdata/policy"); got["replayed"] != 14 || got["unchanged"] != 14 {
			t.Errorf("policy in force: %v, want 14 replayed, all unchanged", got)
		}
		if got := totals("../../replay/testdata/policy-next"); got["newlyDenied"] != 3 || got["newlyAllowed"] != 2 || got["unchanged"] != 9 {
			t.Errorf("candidate: %v, want 3 newly denied, 2 newly allowed, 9 unchanged", got)
		}
	})
	t.Run("a file in which no request can be replayed is an error, not a pass", func(t *testing.T) {
		empty := filepath.Join(dir, "empty.log")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, log := range []string{"../../README.md", empty} {
			code, _, errs := run("--audit-log", log, "--policy", "../../examples", "--fail-on", "newly-denied")
			if code != 2 || !strings.Contains(errs, "could be replayed") {
				t.Errorf("--audit-log %s: exit %d, want 2 naming the log\n%s", log, code, errs)
			}
		}
	})
	t.Run("newly denied fails with --fail-on and names the group in JSON", func(t *testing.T) {
		// The embedded examples grant replay-ann nothing.
		code, out, errs := run("--audit-log", replayLog, "--policy", "../../examples", "--fail-on", "newly-denied", "-o", "json")
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, errs)
		}
		var rep struct {
			Totals      map[string]int64
			NewlyDenied []struct {
				User, Verb, Resource string
				Count                int64
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Totals["eventsRead"] != 16 || rep.NewlyDenied[0].User != "replay-ann" || rep.NewlyDenied[0].Verb != "list" || rep.NewlyDenied[0].Count != 3 {
			t.Errorf("%+v", rep)
		}
	})
	t.Run("a policy granting ann's own requests changes only the impersonated ones", func(t *testing.T) {
		code, out, errs := run("--audit-log", replayLog, "--policy", grant, "--fail-on", "newly-allowed", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: nothing is newly allowed\n%s%s", code, out, errs)
		}
		var rep struct {
			Totals      map[string]int64
			NewlyDenied []struct {
				User, Impersonator, Check string
				Count                     int64
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		// No impersonate grant in this policy: the two impersonated lists
		// and the impersonated get are newly denied, at the impersonation.
		if rep.Totals["newlyDenied"] != 3 || rep.Totals["unchanged"] != 11 {
			t.Errorf("totals %v", rep.Totals)
		}
		for _, g := range rep.NewlyDenied {
			if g.Impersonator != "replay-ann" || g.Check != "impersonation" {
				t.Errorf("newly denied %+v: only impersonated requests should change", g)
			}
		}
		_, table, _ := run("--audit-log", replayLog, "--policy", grant)
		if !strings.Contains(table, "events read 16: replayed 14 (unchanged 11, newly denied 3, newly allowed 0)") {
			t.Errorf("table:\n%s", table)
		}
	})
	t.Run("errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"--policy", grant},
			{"--audit-log", replayLog},
			{"--audit-log", filepath.Join(dir, "missing.log"), "--policy", grant},
			{"--audit-log", replayLog, "--policy", grant, "--fail-on", "sometimes"},
			{"--audit-log", replayLog, "--policy", grant, "--authorization-config", grant},
		} {
			if code, _, errs := run(args...); code != 2 || errs == "" {
				t.Errorf("%v: exit %d (%q), want 2 with a message", args, code, errs)
			}
		}
	})
}
