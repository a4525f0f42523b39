package e2e

import (
	"strings"
	"testing"
)

func TestKubectlApplyOfAppProjects(t *testing.T) {
	ensureNamespace(t, "argocd")
	for _, tc := range []struct {
		name     string
		manifest string
		wantErr  []string // substrings of kubectl's error; none = accepted
	}{
		{
			name: "a deputy.dev AppProject with defaultServiceAccount * is rejected with deputy's message",
			manifest: `apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: star, namespace: argocd}
spec:
  destinationServiceAccounts:
  - {server: "https://kubernetes.default.svc", namespace: guestbook, defaultServiceAccount: "*"}
`,
			// deputy answers 422 Invalid with field causes, so kubectl prints
			// the apiserver's own "is invalid" format.
			wantErr: []string{`The AppProject "star" is invalid`, `spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "*"`, "defaultServiceAccount has an invalid format, '*'"},
		},
		{
			name: "an argoproj.io AppProject with defaultServiceAccount * is rejected too",
			manifest: `apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: star, namespace: argocd}
spec:
  destinationServiceAccounts:
  - {server: "https://kubernetes.default.svc", namespace: guestbook, defaultServiceAccount: "*"}
`,
			wantErr: []string{"defaultServiceAccount has an invalid format, '*'"},
		},
		{
			name: "a valid AppProject is accepted",
			manifest: `apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: argocd}
spec:
  sourceRepos: ["*"]
  destinations:
  - {server: "https://kubernetes.default.svc", namespace: guestbook}
  destinationServiceAccounts:
  - {server: "https://kubernetes.default.svc", namespace: guestbook, defaultServiceAccount: guestbook-deployer}
`,
		},
		{
			name: "a valid argoproj.io AppProject with fields deputy does not model is accepted",
			manifest: `apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: argocd}
spec:
  sourceRepos: ["*"]
  syncWindows: [{kind: allow, schedule: "10 1 * * *", duration: 1h, applications: ["*"]}]
  destinationServiceAccounts:
  - {server: "*", namespace: "*", defaultServiceAccount: "argocd:deployer"}
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := cp.Kubectl(t.Context(), []byte(tc.manifest), "apply", "-f", "-")
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("kubectl apply failed: %v\n%s%s", err, out, stderr)
				}
				return
			}
			if err == nil {
				t.Fatalf("kubectl apply succeeded, want rejection:\n%s", out)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("kubectl error lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
