package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gobwas/glob"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	"deputy.dev/deputy/policy/v1alpha1"
)

const (
	inCluster = "https://kubernetes.default.svc"
	remote    = "https://remote.example.com:6443"
)

type dsa = v1alpha1.ApplicationDestinationServiceAccount

func projectWith(spec v1alpha1.AppProjectSpec) *v1alpha1.AppProject {
	return &v1alpha1.AppProject{Spec: spec}
}

func projectWithSAs(entries ...dsa) *v1alpha1.AppProject {
	return projectWith(v1alpha1.AppProjectSpec{DestinationServiceAccounts: entries})
}

func errStrings(t *testing.T, p *v1alpha1.AppProject) ([]string, []string) {
	t.Helper()
	errs, warnings := ValidateAppProject(p)
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out, warnings
}

func TestValidateAppProject(t *testing.T) {
	tests := []struct {
		name         string
		project      *v1alpha1.AppProject
		wantErrs     []string
		wantWarnings []string
	}{
		{
			name: "a nil project is valid",
		},
		{
			name: "a project following the Argo CD docs is valid without warnings",
			project: projectWith(v1alpha1.AppProjectSpec{
				SourceRepos:      []string{"https://github.com/argoproj/argocd-example-apps.git", "!https://github.com/evil/*"},
				SourceNamespaces: []string{"argocd-apps", "team-*"},
				Destinations: []v1alpha1.ApplicationDestination{
					{Server: inCluster, Namespace: "guestbook-*"},
					{Name: "in-cluster", Namespace: "!kube-system"},
					{Server: "!https://prod.*", Namespace: "*"},
				},
				Roles: []v1alpha1.ProjectRole{{Name: "ci", Policies: []string{"p, proj:p:ci, applications, sync, p/*, allow"}, Groups: []string{"ci-bots"}}},
				DestinationServiceAccounts: []dsa{
					{Server: inCluster, Namespace: "guestbook-prod", DefaultServiceAccount: "prod-deployer"},
					{Server: inCluster, Namespace: "guestbook-*", DefaultServiceAccount: "guestbook-deployer"},
					{Server: "*", Namespace: "*", DefaultServiceAccount: "argocd:catch-all"},
				},
			}),
		},
		{
			name: "a destination name, server or namespace of !* is rejected with upstream's message",
			project: projectWith(v1alpha1.AppProjectSpec{Destinations: []v1alpha1.ApplicationDestination{
				{Name: "!*", Server: "!*", Namespace: "!*"},
			}}),
			wantErrs: []string{
				`spec.destinations[0].name: Invalid value: "!*": name has an invalid format, '!*'`,
				`spec.destinations[0].server: Invalid value: "!*": server has an invalid format, '!*'`,
				`spec.destinations[0].namespace: Invalid value: "!*": namespace has an invalid format, '!*'`,
			},
		},
		{
			name: "a repeated destination is rejected with upstream's message",
			project: projectWith(v1alpha1.AppProjectSpec{Destinations: []v1alpha1.ApplicationDestination{
				{Server: inCluster, Namespace: "guestbook"},
				{Server: inCluster, Namespace: "other"},
				{Server: inCluster, Namespace: "guestbook"},
			}}),
			wantErrs: []string{
				`spec.destinations[2]: Duplicate value: {"server":"https://kubernetes.default.svc","namespace":"guestbook"}: destination 'https://kubernetes.default.svc/guestbook' already added`,
			},
		},
		{
			name: "a repeated destination given by cluster name is keyed by the name",
			project: projectWith(v1alpha1.AppProjectSpec{Destinations: []v1alpha1.ApplicationDestination{
				{Name: "in-cluster", Namespace: "guestbook"},
				{Name: "in-cluster", Namespace: "guestbook"},
			}}),
			wantErrs: []string{
				`spec.destinations[1]: Duplicate value: {"namespace":"guestbook","name":"in-cluster"}: destination 'in-cluster/guestbook' already added`,
			},
		},
		{
			name: "a destination by server and one by a cluster name of the same text are not duplicates",
			project: projectWith(v1alpha1.AppProjectSpec{Destinations: []v1alpha1.ApplicationDestination{
				{Server: "prod", Namespace: "guestbook"},
				{Name: "prod", Namespace: "guestbook"},
			}}),
		},
		{
			name: "destinations whose joined strings collide but whose pairs differ are not duplicates",
			project: projectWith(v1alpha1.AppProjectSpec{Destinations: []v1alpha1.ApplicationDestination{
				{Server: "a/b", Namespace: "c"},
				{Server: "a", Namespace: "b/c"},
			}}),
		},
		{
			name: "a destination pattern that is not a valid glob is rejected with the reason and the fix",
			project: projectWith(v1alpha1.AppProjectSpec{Destinations: []v1alpha1.ApplicationDestination{
				{Server: "https://[", Namespace: "![a"},
			}}),
			wantErrs: []string{
				`spec.destinations[0].server: Invalid value: "https://[": server is not a valid glob pattern (unexpected end of input): fix the pattern or escape the metacharacter with a backslash (gobwas/glob syntax: * ? [a-z] {a,b}; a leading ! negates)`,
				`spec.destinations[0].namespace: Invalid value: "![a": namespace is not a valid glob pattern (unexpected end of input): fix the pattern or escape the metacharacter with a backslash (gobwas/glob syntax: * ? [a-z] {a,b}; a leading ! negates)`,
			},
		},
		{
			name: "source repositories of !* or repeated are rejected with upstream's messages",
			project: projectWith(v1alpha1.AppProjectSpec{SourceRepos: []string{
				"https://github.com/a/b.git", "!*", "https://github.com/a/b.git",
			}}),
			wantErrs: []string{
				`spec.sourceRepos[1]: Invalid value: "!*": source repository has an invalid format, '!*'`,
				`spec.sourceRepos[2]: Duplicate value: "https://github.com/a/b.git": source repository 'https://github.com/a/b.git' already added`,
			},
		},
		{
			name:    "a repeated source namespace is rejected with upstream's message",
			project: projectWith(v1alpha1.AppProjectSpec{SourceNamespaces: []string{"team-a", "team-a"}}),
			wantErrs: []string{
				`spec.sourceNamespaces[1]: Duplicate value: "team-a": source namespace 'team-a' already added`,
			},
		},
		{
			name: "repeated roles, policies and groups are rejected with upstream's messages",
			project: projectWith(v1alpha1.AppProjectSpec{Roles: []v1alpha1.ProjectRole{
				{Name: "ci", Policies: []string{"p1", "p1"}, Groups: []string{"g", "g"}},
				{Name: "ci"},
			}}),
			wantErrs: []string{
				`spec.roles[0].policies[1]: Duplicate value: "p1": policy 'p1' already exists for role 'ci'`,
				`spec.roles[0].groups[1]: Duplicate value: "g": group 'g' already exists for role 'ci'`,
				`spec.roles[1].name: Duplicate value: "ci": role 'ci' already exists`,
			},
		},
		{
			name: "a destinationServiceAccounts server or namespace containing ! is rejected with upstream's message",
			project: projectWithSAs(
				dsa{Server: "!" + inCluster, Namespace: "guestbook", DefaultServiceAccount: "sa"},
				dsa{Server: inCluster, Namespace: "guest!book", DefaultServiceAccount: "sa"},
				dsa{Server: "!*", Namespace: "!*", DefaultServiceAccount: "sa"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].server: Invalid value: "!https://kubernetes.default.svc": server has an invalid format, '!https://kubernetes.default.svc': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*`,
				`spec.destinationServiceAccounts[1].namespace: Invalid value: "guest!book": namespace has an invalid format, 'guest!book': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*`,
				`spec.destinationServiceAccounts[2].server: Invalid value: "!*": server has an invalid format, '!*': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*`,
				`spec.destinationServiceAccounts[2].namespace: Invalid value: "!*": namespace has an invalid format, '!*': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*`,
			},
		},
		{
			name: "a destinationServiceAccounts server or namespace that is not a valid glob is rejected with upstream's message",
			project: projectWithSAs(
				dsa{Server: "https://[", Namespace: "guestbook", DefaultServiceAccount: "sa"},
				dsa{Server: inCluster, Namespace: "team-[a", DefaultServiceAccount: "sa"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].server: Invalid value: "https://[": server has an invalid format, 'https://['`,
				`spec.destinationServiceAccounts[1].namespace: Invalid value: "team-[a": namespace has an invalid format, 'team-[a'`,
			},
		},
		{
			name: "a defaultServiceAccount that is blank or has one of !*[]{}\\/ is rejected with upstream's message",
			project: projectWithSAs(
				dsa{Server: "s0", DefaultServiceAccount: "*"},
				dsa{Server: "s1", DefaultServiceAccount: ""},
				dsa{Server: "s2", DefaultServiceAccount: "   "},
				dsa{Server: "s3", DefaultServiceAccount: "argocd/deployer"},
				dsa{Server: "s4", DefaultServiceAccount: "argocd:deploy*"},
				dsa{Server: "s5", DefaultServiceAccount: "!sa"},
				dsa{Server: "s6", DefaultServiceAccount: "[sa]"},
				dsa{Server: "s7", DefaultServiceAccount: "{sa}"},
				dsa{Server: "s8", DefaultServiceAccount: `a\b`},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "*": defaultServiceAccount has an invalid format, '*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[1].defaultServiceAccount: Invalid value: "": defaultServiceAccount has an invalid format, '': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[2].defaultServiceAccount: Invalid value: "   ": defaultServiceAccount has an invalid format, '   ': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[3].defaultServiceAccount: Invalid value: "argocd/deployer": defaultServiceAccount has an invalid format, 'argocd/deployer': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[4].defaultServiceAccount: Invalid value: "argocd:deploy*": defaultServiceAccount has an invalid format, 'argocd:deploy*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[5].defaultServiceAccount: Invalid value: "!sa": defaultServiceAccount has an invalid format, '!sa': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[6].defaultServiceAccount: Invalid value: "[sa]": defaultServiceAccount has an invalid format, '[sa]': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[7].defaultServiceAccount: Invalid value: "{sa}": defaultServiceAccount has an invalid format, '{sa}': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[8].defaultServiceAccount: Invalid value: "a\\b": defaultServiceAccount has an invalid format, 'a\b': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
			},
		},
		{
			name: "a pattern that would crash gobwas/glob is rejected with upstream's message",
			project: projectWith(v1alpha1.AppProjectSpec{
				Destinations: []v1alpha1.ApplicationDestination{{Server: "0{}", Namespace: "*"}},
				DestinationServiceAccounts: []dsa{
					{Server: "0{", Namespace: "*", DefaultServiceAccount: "sa"},
					{Server: "*", Namespace: "{0*0*0*0*0,0}", DefaultServiceAccount: "sa"},
				},
			}),
			wantErrs: []string{
				`spec.destinations[0].server: Invalid value: "0{}": server is not a valid glob pattern (the pattern hits a gobwas/glob bug that crashes matching (an empty or unterminated {} alternative): rewrite it): fix the pattern or escape the metacharacter with a backslash (gobwas/glob syntax: * ? [a-z] {a,b}; a leading ! negates)`,
				`spec.destinationServiceAccounts[0].server: Invalid value: "0{": server has an invalid format, '0{'`,
				`spec.destinationServiceAccounts[1].namespace: Invalid value: "{0*0*0*0*0,0}": namespace has an invalid format, '{0*0*0*0*0,0}'`,
			},
		},
		{
			name: "a pattern longer than 256 bytes is rejected before it is compiled",
			project: projectWith(v1alpha1.AppProjectSpec{
				Destinations:               []v1alpha1.ApplicationDestination{{Server: "https://" + strings.Repeat("?", 250), Namespace: "*"}},
				DestinationServiceAccounts: []dsa{{Server: "*", Namespace: strings.Repeat("a", 257), DefaultServiceAccount: "sa"}},
			}),
			wantErrs: []string{
				`spec.destinations[0].server: Too long: the server pattern is 258 bytes long; deputy accepts at most 256 (glob compile time grows faster than quadratically with length): shorten it`,
				`spec.destinationServiceAccounts[0].namespace: Too long: the namespace pattern is 257 bytes long; deputy accepts at most 256 (glob compile time grows faster than quadratically with length): shorten it`,
			},
		},
		{
			name: "a pattern with more than four stars is allowed with a warning about matching time",
			project: projectWithSAs(
				dsa{Server: "https://*-*-*-*-*.example.com", Namespace: "team-**-*", DefaultServiceAccount: "sa"},
				dsa{Server: "https://*-*-*-*.example.com", Namespace: `a\*b\*c\*d\*e\*`, DefaultServiceAccount: "sa"},
			),
			wantWarnings: []string{
				`spec.destinationServiceAccounts[0].server "https://*-*-*-*-*.example.com" has 5 '*' wildcards: gobwas/glob (the matcher Argo CD uses) can take time exponential in their number to match it; use at most 4`,
			},
		},
		{
			name: "a repeated (server, namespace) pair is rejected with upstream's message",
			project: projectWithSAs(
				dsa{Server: inCluster, Namespace: "guestbook", DefaultServiceAccount: "a"},
				dsa{Server: inCluster, Namespace: "guestbook", DefaultServiceAccount: "b"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[1]: Duplicate value: {"server":"https://kubernetes.default.svc","namespace":"guestbook"}: destinationServiceAccount 'https://kubernetes.default.svc/guestbook' already added`,
			},
		},
		{
			name: "pairs whose joined strings collide are not duplicates",
			project: projectWithSAs(
				dsa{Server: "a/b", Namespace: "c", DefaultServiceAccount: "x"},
				dsa{Server: "a", Namespace: "b/c", DefaultServiceAccount: "y"},
			),
		},
		{
			name:    "a defaultServiceAccount with more than one colon is rejected naming the count and the fix",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "argocd:deployer:extra"}),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "argocd:deployer:extra": has 2 colons: write "name" for a ServiceAccount in the Application's destination namespace, or "namespace:name" with exactly one colon`,
			},
		},
		{
			name: "a namespace:name with an empty side is rejected saying which side",
			project: projectWithSAs(
				dsa{Server: "a", DefaultServiceAccount: ":deployer"},
				dsa{Server: "b", DefaultServiceAccount: "argocd:"},
				dsa{Server: "c", DefaultServiceAccount: ":"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: ":deployer": the namespace before the colon is empty: write "namespace:name", or just "name" for a ServiceAccount in the Application's destination namespace`,
				`spec.destinationServiceAccounts[1].defaultServiceAccount: Invalid value: "argocd:": the ServiceAccount name after the colon is empty: write "namespace:name"`,
				`spec.destinationServiceAccounts[2].defaultServiceAccount: Invalid value: ":": the namespace before the colon is empty: write "namespace:name", or just "name" for a ServiceAccount in the Application's destination namespace`,
				`spec.destinationServiceAccounts[2].defaultServiceAccount: Invalid value: ":": the ServiceAccount name after the colon is empty: write "namespace:name"`,
			},
		},
		{
			name:    "a namespace that is not a DNS-1123 label is rejected with a suggested name",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "Team_A:deployer"}),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "Team_A:deployer": namespace "Team_A" is not a valid Kubernetes namespace name (a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')): use lower-case letters, digits and '-', e.g. "team-a"`,
			},
		},
		{
			name: "a ServiceAccount name that is not a DNS-1123 subdomain is rejected with a suggested name",
			project: projectWithSAs(
				dsa{Server: "a", DefaultServiceAccount: "My Deployer"},
				dsa{Server: "b", DefaultServiceAccount: "argocd: deployer"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "My Deployer": ServiceAccount name "My Deployer" is not a valid Kubernetes ServiceAccount name (a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')): use lower-case letters, digits and '-', e.g. "my-deployer"`,
				`spec.destinationServiceAccounts[1].defaultServiceAccount: Invalid value: "argocd: deployer": ServiceAccount name " deployer" is not a valid Kubernetes ServiceAccount name (a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')): use lower-case letters, digits and '-', e.g. "deployer"`,
			},
		},
		{
			name: "every invalid entry is reported, not only the first",
			project: projectWithSAs(
				dsa{Server: "!a", Namespace: "ns", DefaultServiceAccount: "*"},
				dsa{Server: "ok", Namespace: "ns", DefaultServiceAccount: "ok"},
				dsa{Server: "ok", Namespace: "ns", DefaultServiceAccount: "a:b:c"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].server: Invalid value: "!a": server has an invalid format, '!a': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*`,
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "*": defaultServiceAccount has an invalid format, '*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				`spec.destinationServiceAccounts[2].defaultServiceAccount: Invalid value: "a:b:c": has 2 colons: write "name" for a ServiceAccount in the Application's destination namespace, or "namespace:name" with exactly one colon`,
				`spec.destinationServiceAccounts[2]: Duplicate value: {"server":"ok","namespace":"ns"}: destinationServiceAccount 'ok/ns' already added`,
			},
		},
		{
			name: "an entry after a catch-all entry is reported as never used, naming both indices",
			project: projectWithSAs(
				dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "catch-all"},
				dsa{Server: inCluster, Namespace: "guestbook", DefaultServiceAccount: "guestbook"},
			),
			wantWarnings: []string{
				`spec.destinationServiceAccounts[1] (server "https://kubernetes.default.svc", namespace "guestbook") can never be used: spec.destinationServiceAccounts[0] (server "*", namespace "*") matches every destination it matches and the first match wins; remove entry 1 or move it above entry 0`,
			},
		},
		{
			name: "a glob entry after a namespace catch-all on the same server is reported as never used",
			project: projectWithSAs(
				dsa{Server: inCluster, Namespace: "*", DefaultServiceAccount: "a"},
				dsa{Server: inCluster, Namespace: "guestbook-*", DefaultServiceAccount: "b"},
				dsa{Server: "https://*", Namespace: "guestbook-*", DefaultServiceAccount: "c"},
			),
			wantWarnings: []string{
				`spec.destinationServiceAccounts[1] (server "https://kubernetes.default.svc", namespace "guestbook-*") can never be used: spec.destinationServiceAccounts[0] (server "https://kubernetes.default.svc", namespace "*") matches every destination it matches and the first match wins; remove entry 1 or move it above entry 0`,
			},
		},
		{
			name: "a literal entry after a glob that matches it is reported as never used",
			project: projectWithSAs(
				dsa{Server: inCluster, Namespace: "guestbook-*", DefaultServiceAccount: "a"},
				dsa{Server: inCluster, Namespace: "guestbook-prod", DefaultServiceAccount: "b"},
				dsa{Server: remote, Namespace: "guestbook-prod", DefaultServiceAccount: "c"},
			),
			wantWarnings: []string{
				`spec.destinationServiceAccounts[1] (server "https://kubernetes.default.svc", namespace "guestbook-prod") can never be used: spec.destinationServiceAccounts[0] (server "https://kubernetes.default.svc", namespace "guestbook-*") matches every destination it matches and the first match wins; remove entry 1 or move it above entry 0`,
			},
		},
		{
			name: "an empty namespace after a star is reported because star also matches the empty namespace",
			project: projectWithSAs(
				dsa{Server: "*", Namespace: "**", DefaultServiceAccount: "a"},
				dsa{Server: "https://a.example.com", Namespace: "", DefaultServiceAccount: "b"},
			),
			wantWarnings: []string{
				`spec.destinationServiceAccounts[1] (server "https://a.example.com", namespace "") can never be used: spec.destinationServiceAccounts[0] (server "*", namespace "**") matches every destination it matches and the first match wins; remove entry 1 or move it above entry 0`,
			},
		},
		{
			name: "a star in an earlier server pattern is known to span dots, colons and slashes",
			project: projectWithSAs(
				dsa{Server: "https://*", Namespace: "*", DefaultServiceAccount: "a"},
				dsa{Server: "https://a.example.com:6443/k8s", Namespace: "x", DefaultServiceAccount: "b"},
			),
			wantWarnings: []string{
				`spec.destinationServiceAccounts[1] (server "https://a.example.com:6443/k8s", namespace "x") can never be used: spec.destinationServiceAccounts[0] (server "https://*", namespace "*") matches every destination it matches and the first match wins; remove entry 1 or move it above entry 0`,
			},
		},
		{
			name: "the Argo CD docs order (specific, prefix, catch-all) has no warning",
			project: projectWithSAs(
				dsa{Server: inCluster, Namespace: "guestbook-prod", DefaultServiceAccount: "a"},
				dsa{Server: inCluster, Namespace: "guestbook-*", DefaultServiceAccount: "b"},
				dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "c"},
			),
		},
		{
			name: "a later glob that an earlier different glob happens to cover is not reported because it is not provable",
			project: projectWithSAs(
				dsa{Server: "*", Namespace: "guestbook-*", DefaultServiceAccount: "a"},
				dsa{Server: "*", Namespace: "guestbook-{dev,prod}", DefaultServiceAccount: "b"},
			),
		},
		{
			name: "entries that overlap only partly are not reported",
			project: projectWithSAs(
				dsa{Server: inCluster, Namespace: "*", DefaultServiceAccount: "a"},
				dsa{Server: "*", Namespace: "guestbook", DefaultServiceAccount: "b"},
				dsa{Server: remote, Namespace: "a*", DefaultServiceAccount: "c"},
				dsa{Server: remote, Namespace: "b*", DefaultServiceAccount: "d"},
			),
		},
		{
			name: "an entry with an invalid pattern neither shadows nor is shadowed",
			project: projectWithSAs(
				dsa{Server: "*", Namespace: "[", DefaultServiceAccount: "a"},
				dsa{Server: "*", Namespace: "guestbook", DefaultServiceAccount: "b"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[0].namespace: Invalid value: "[": namespace has an invalid format, '['`,
			},
		},
		{
			name: "an exact duplicate is an error and not also a warning",
			project: projectWithSAs(
				dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "a"},
				dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "b"},
			),
			wantErrs: []string{
				`spec.destinationServiceAccounts[1]: Duplicate value: {"server":"*","namespace":"*"}: destinationServiceAccount '*/*' already added`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotErrs, gotWarnings := errStrings(t, tt.project)
			if diff := cmp.Diff(tt.wantErrs, gotErrs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWarnings, gotWarnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeriveServiceAccount(t *testing.T) {
	perNamespace := projectWithSAs(
		dsa{Server: inCluster, Namespace: "guestbook", DefaultServiceAccount: "guestbook-deployer"},
		dsa{Server: inCluster, Namespace: "guestbook-dev", DefaultServiceAccount: "guestbook-dev-deployer"},
		dsa{Server: inCluster, Namespace: "guestbook-stage", DefaultServiceAccount: "guestbook-stage-deployer"},
	)
	otherCluster := projectWithSAs(
		dsa{Server: inCluster, Namespace: "*", DefaultServiceAccount: "in-cluster-deployer"},
		dsa{Server: remote, Namespace: "*", DefaultServiceAccount: "remote-deployer"},
	)
	firstMatch := projectWithSAs(
		dsa{Server: inCluster, Namespace: "guestbook-prod", DefaultServiceAccount: "prod-deployer"},
		dsa{Server: inCluster, Namespace: "guestbook-*", DefaultServiceAccount: "guestbook-deployer"},
		dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "default-deployer"},
	)
	tests := []struct {
		name                     string
		project                  *v1alpha1.AppProject
		server, namespace, appNS string
		wantUser                 string
		wantIndex                int
		wantErr                  string
	}{
		{
			name:    "a catch-all entry gives the ServiceAccount in the destination namespace",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "argocd-deployer"}),
			server:  inCluster, namespace: "guestbook", appNS: "argocd",
			wantUser: "system:serviceaccount:guestbook:argocd-deployer",
		},
		{
			name:    "one entry per namespace picks the entry of that namespace",
			project: perNamespace, server: inCluster, namespace: "guestbook-dev",
			wantUser: "system:serviceaccount:guestbook-dev:guestbook-dev-deployer", wantIndex: 1,
		},
		{
			name:    "one entry per namespace matches nothing for another namespace",
			project: perNamespace, server: inCluster, namespace: "other",
			wantIndex: -1,
		},
		{
			name:    "an entry for another cluster's server is chosen for that server",
			project: otherCluster, server: remote, namespace: "guestbook",
			wantUser: "system:serviceaccount:guestbook:remote-deployer", wantIndex: 1,
		},
		{
			name:    "an entry for another cluster's server is not chosen for the local cluster",
			project: otherCluster, server: inCluster, namespace: "guestbook",
			wantUser: "system:serviceaccount:guestbook:in-cluster-deployer",
		},
		{
			name:    "no entry matches an unknown server",
			project: otherCluster, server: "https://unknown.example.com", namespace: "guestbook",
			wantIndex: -1,
		},
		{
			name:    "first match wins: myns falls through to the catch-all",
			project: firstMatch, server: inCluster, namespace: "myns",
			wantUser: "system:serviceaccount:myns:default-deployer", wantIndex: 2,
		},
		{
			name:    "first match wins: guestbook-dev takes the prefix entry",
			project: firstMatch, server: inCluster, namespace: "guestbook-dev",
			wantUser: "system:serviceaccount:guestbook-dev:guestbook-deployer", wantIndex: 1,
		},
		{
			name:    "first match wins: guestbook-prod takes its own entry",
			project: firstMatch, server: inCluster, namespace: "guestbook-prod",
			wantUser: "system:serviceaccount:guestbook-prod:prod-deployer",
		},
		{
			name:    "a namespace:name ServiceAccount lives in the namespace it names",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "argocd:deployer"}),
			server:  inCluster, namespace: "guestbook", appNS: "apps",
			wantUser: "system:serviceaccount:argocd:deployer",
		},
		{
			name:    "an empty destination namespace puts the ServiceAccount in the Application's namespace",
			project: projectWithSAs(dsa{Server: "*", Namespace: "", DefaultServiceAccount: "deployer"}),
			server:  inCluster, namespace: "", appNS: "argocd-apps",
			wantUser: "system:serviceaccount:argocd-apps:deployer",
		},
		{
			name:    "a star namespace pattern also matches an empty destination namespace",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "deployer"}),
			server:  inCluster, namespace: "", appNS: "argocd-apps",
			wantUser: "system:serviceaccount:argocd-apps:deployer",
		},
		{
			name:    "the namespace pattern is matched against the raw destination namespace, not the Application's",
			project: projectWithSAs(dsa{Server: "*", Namespace: "argocd-apps", DefaultServiceAccount: "deployer"}),
			server:  inCluster, namespace: "", appNS: "argocd-apps",
			wantIndex: -1,
		},
		{
			name:    "a star in the server pattern spans dots, colons and slashes",
			project: projectWithSAs(dsa{Server: "https://*", Namespace: "team-?", DefaultServiceAccount: "deployer"}),
			server:  "https://a.example.com:6443/k8s", namespace: "team-a",
			wantUser: "system:serviceaccount:team-a:deployer",
		},
		{
			name:    "an empty project matches nothing",
			project: projectWithSAs(), server: inCluster, namespace: "guestbook",
			wantIndex: -1,
		},
		{
			name:    "a matched entry whose ServiceAccount breaks upstream's rule fails with upstream's message",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "*"}),
			server:  inCluster, namespace: "guestbook",
			wantErr: "default service account contains invalid chars '*'",
		},
		{
			name:    "a blank ServiceAccount fails with upstream's message",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "  "}),
			server:  inCluster, namespace: "guestbook",
			wantErr: "default service account contains invalid chars '  '",
		},
		{
			name: "a matched entry whose ServiceAccount breaks deputy's rule fails with the index",
			project: projectWithSAs(
				dsa{Server: remote, Namespace: "*", DefaultServiceAccount: "ok"},
				dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "a:b:c"},
			),
			server: inCluster, namespace: "guestbook", wantIndex: 1,
			wantErr: `defaultServiceAccount "a:b:c" is invalid: has 2 colons: write "name" for a ServiceAccount in the Application's destination namespace, or "namespace:name" with exactly one colon`,
		},
		{
			name:    "an invalid server glob fails when the walk reaches it, as upstream",
			project: projectWithSAs(dsa{Server: "[", Namespace: "*", DefaultServiceAccount: "sa"}),
			server:  inCluster, namespace: "guestbook",
			wantErr: "invalid glob pattern for destination server: unexpected end of input",
		},
		{
			name:    "an invalid namespace glob fails when the walk reaches it, as upstream",
			project: projectWithSAs(dsa{Server: "*", Namespace: "[a", DefaultServiceAccount: "sa"}),
			server:  inCluster, namespace: "guestbook",
			wantErr: "invalid glob pattern for destination namespace: unexpected end of input",
		},
		{
			name:    "a pattern that would crash gobwas/glob fails the derivation instead of crashing",
			project: projectWithSAs(dsa{Server: "0{", Namespace: "*", DefaultServiceAccount: "sa"}),
			server:  "0", namespace: "guestbook",
			wantErr: "invalid glob pattern for destination server: the pattern hits a gobwas/glob bug that crashes matching (an empty or unterminated {} alternative): rewrite it",
		},
		{
			name: "an invalid glob after the matching entry is never reached",
			project: projectWithSAs(
				dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "sa"},
				dsa{Server: "[", Namespace: "*", DefaultServiceAccount: "sa"},
			),
			server: inCluster, namespace: "guestbook",
			wantUser: "system:serviceaccount:guestbook:sa",
		},
		{
			name:    "a bare name with no destination or Application namespace fails instead of building a broken username",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "sa"}),
			server:  inCluster,
			wantErr: `cannot derive the namespace of ServiceAccount "sa": the destination namespace and the Application's namespace are both empty; set spec.destination.namespace or use "namespace:name" in defaultServiceAccount`,
		},
		{
			name:    "a bare name in a destination namespace that is not a namespace name fails",
			project: projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "sa"}),
			server:  inCluster, namespace: "kube-system:admin",
			wantErr: `cannot derive ServiceAccount "sa" in namespace "kube-system:admin": not a valid namespace name (a lowercase RFC 1123 label)`,
		},
		{
			name:      "a destination namespace longer than any namespace fails before matching",
			project:   projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "argocd:sa"}),
			server:    inCluster,
			namespace: strings.Repeat("a", 254),
			wantIndex: -1,
			wantErr:   "destination namespace is 254 bytes long; no namespace name is longer than 253",
		},
		{
			name:      "a destination server longer than 2048 bytes fails before matching",
			project:   projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "argocd:sa"}),
			server:    "https://" + strings.Repeat("a", 2041),
			namespace: "guestbook",
			wantIndex: -1,
			wantErr:   "destination server is 2049 bytes long, more than the 2048 deputy accepts",
		},
		{
			name:      "a pattern longer than 256 bytes fails the derivation when reached",
			project:   projectWithSAs(dsa{Server: strings.Repeat("a", 257), Namespace: "*", DefaultServiceAccount: "sa"}),
			server:    inCluster,
			namespace: "guestbook",
			wantErr:   "invalid glob pattern for destination server: the pattern is 257 bytes long, more than the 256 deputy accepts",
		},
		{
			name:      "a nil project matches nothing",
			server:    inCluster,
			namespace: "guestbook",
			wantIndex: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, idx, err := deriveServiceAccount(tt.project, tt.server, tt.namespace, tt.appNS)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				if user != "" || idx != tt.wantIndex {
					t.Errorf("on error got (%q, %d), want (\"\", %d)", user, idx, tt.wantIndex)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if user != tt.wantUser || idx != tt.wantIndex {
				t.Fatalf("got (%q, %d), want (%q, %d)", user, idx, tt.wantUser, tt.wantIndex)
			}
			if user != "" {
				if _, _, err := serviceaccount.SplitUsername(user); err != nil {
					t.Errorf("derived username %q does not parse as a ServiceAccount: %v", user, err)
				}
			}
			if tt.project == nil {
				return
			}
			// The precompiled path gives the same answer.
			c, err := CompileAppProject(tt.project)
			if err != nil {
				// Only a project with a pattern that does not compile is
				// refused, and validation rejects it too.
				if errs, _ := ValidateAppProject(tt.project); len(errs) == 0 {
					t.Fatalf("CompileAppProject refused a valid project: %v", err)
				}
				return
			}
			cu, ci, cerr := c.Derive(tt.server, tt.namespace, tt.appNS)
			if cu != user || ci != idx || cerr != nil {
				t.Errorf("compiled Derive = (%q, %d, %v), want (%q, %d, nil)", cu, ci, cerr, user, idx)
			}
			if _, _, ri, rerr := c.DeriveRef(tt.server, tt.namespace, tt.appNS); ri != idx || rerr != nil {
				t.Errorf("DeriveRef index, error = %d, %v; want %d, nil", ri, rerr, idx)
			}
		})
	}
}

func TestCompileAppProject(t *testing.T) {
	t.Run("a project with invalid globs is refused, naming every bad entry", func(t *testing.T) {
		p := projectWithSAs(
			dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "sa"},
			dsa{Server: "[", Namespace: "[a", DefaultServiceAccount: "sa"},
		)
		p.Name = "proj"
		c, err := CompileAppProject(p)
		if c != nil || err == nil {
			t.Fatalf("got (%v, %v), want an error", c, err)
		}
		want := "failed to compile AppProject \"proj\": spec.destinationServiceAccounts[1].server \"[\" is not a valid glob: unexpected end of input\n" +
			"spec.destinationServiceAccounts[1].namespace \"[a\" is not a valid glob: unexpected end of input"
		if err.Error() != want {
			t.Errorf("error =\n%s\nwant\n%s", err, want)
		}
	})
	t.Run("a nil project is refused", func(t *testing.T) {
		if _, err := CompileAppProject(nil); err == nil {
			t.Fatal("want an error")
		}
	})
	t.Run("a compiled project keeps its name and entry count", func(t *testing.T) {
		p := projectWithSAs(dsa{Server: "*", Namespace: "*", DefaultServiceAccount: "sa"}, dsa{Server: "a", DefaultServiceAccount: "sa"})
		p.Name = "proj"
		c, err := CompileAppProject(p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Name() != "proj" || c.Len() != 2 {
			t.Errorf("Name, Len = %q, %d; want proj, 2", c.Name(), c.Len())
		}
		var m *ProjectMatcher = c
		if ns, name, i, err := m.DeriveRef(inCluster, "", "apps"); ns != "apps" || name != "sa" || i != 0 || err != nil {
			t.Errorf("DeriveRef = (%q, %q, %d, %v), want (apps, sa, 0, nil)", ns, name, i, err)
		}
	})
	t.Run("a project ValidateAppProject accepts always compiles", func(t *testing.T) {
		p := projectWithSAs(dsa{Server: "https://{a,b}.example.com", Namespace: "team-[a-c]", DefaultServiceAccount: "sa"})
		if errs, _ := ValidateAppProject(p); len(errs) > 0 {
			t.Fatal(errs)
		}
		if _, err := CompileAppProject(p); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEnforcedServiceAccountError(t *testing.T) {
	err := EnforcedServiceAccountError(inCluster, "guestbook")
	if want := "no matching service account found for destination server https://kubernetes.default.svc and namespace guestbook"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if !errors.Is(err, ErrNoMatchingServiceAccount) {
		t.Error("errors.Is(err, ErrNoMatchingServiceAccount) = false")
	}
	if errors.Is(errors.New("other"), ErrNoMatchingServiceAccount) {
		t.Error("an unrelated error matches ErrNoMatchingServiceAccount")
	}
}

// FuzzValidateAppProject checks that validation, compilation and derivation
// never panic, and that a project ValidateAppProject accepts compiles and
// derives only well-formed ServiceAccount usernames.
func FuzzValidateAppProject(f *testing.F) {
	f.Add("*", "*", "sa", inCluster, "guestbook-*", "argocd:sa", inCluster, "guestbook-dev", "apps")
	f.Add("!a", "[", "*", "a/b", "b/c", "a:b:c", "a", "", "")
	f.Add("{a,b", "**", ":", "", "", "ns:", "", "Team_A", "x:y")
	f.Add("https://*", "?", " sa", `\`, "{a,{b,c}}", "My SA", "https://x", "a.b", "ok")
	// Patterns that crash gobwas/glob v0.2.3 when matched.
	f.Add("1", "0", "0", "0{", "0", "0", "0", "0", "")
	f.Add("{0*0*0*0*0,0}", "0{}", "sa", "0{\x00}", "*", "sa", "0", "0", "apps")
	f.Fuzz(func(t *testing.T, s1, n1, sa1, s2, n2, sa2, server, ns, appNS string) {
		p := projectWith(v1alpha1.AppProjectSpec{
			SourceRepos:      []string{s1, s2},
			SourceNamespaces: []string{n1, n2},
			Destinations: []v1alpha1.ApplicationDestination{
				{Server: s1, Namespace: n1, Name: sa1},
				{Server: s2, Namespace: n2, Name: sa2},
			},
			Roles: []v1alpha1.ProjectRole{{Name: sa1, Groups: []string{sa2, sa2}}},
			DestinationServiceAccounts: []dsa{
				{Server: s1, Namespace: n1, DefaultServiceAccount: sa1},
				{Server: s2, Namespace: n2, DefaultServiceAccount: sa2},
			},
		})
		errs, warnings := ValidateAppProject(p)
		for _, w := range warnings {
			if !strings.HasPrefix(w, "spec.destinationServiceAccounts[1] ") && !strings.Contains(w, "' wildcards: ") {
				t.Errorf("unexpected warning %q", w)
			}
		}
		user, idx, derr := deriveServiceAccount(p, server, ns, appNS)
		if idx < -1 || idx > 1 || (user != "" && (derr != nil || idx < 0)) {
			t.Fatalf("inconsistent derivation (%q, %d, %v)", user, idx, derr)
		}
		if saIsNamespaceName(ns) != (len(validation.IsDNS1123Label(ns)) == 0) {
			t.Fatalf("saIsNamespaceName(%q) disagrees with validation.IsDNS1123Label", ns)
		}
		c, cerr := CompileAppProject(p)
		if len(errs) > 0 {
			if cerr == nil {
				_, _, _ = c.Derive(server, ns, appNS)
			}
			return
		}
		if cerr != nil {
			t.Fatalf("valid project does not compile: %v", cerr)
		}
		cu, ci, cderr := c.Derive(server, ns, appNS)
		if cu != user || ci != idx || fmt.Sprint(cderr) != fmt.Sprint(derr) {
			t.Fatalf("compiled (%q, %d, %v) != uncompiled (%q, %d, %v)", cu, ci, cderr, user, idx, derr)
		}
		if derr != nil && strings.Contains(derr.Error(), "failed to match") {
			t.Fatalf("a valid project's pattern crashed gobwas/glob: %v", derr)
		}
		if derr != nil {
			// The only derivation failures left for a valid project are about
			// the inputs: the namespace taken from the destination or the
			// Application, or inputs longer than any real one.
			if !strings.HasPrefix(derr.Error(), "cannot derive ") && !strings.Contains(derr.Error(), " bytes long") {
				t.Fatalf("valid project failed to derive: %v", derr)
			}
			return
		}
		if user != "" {
			sns, sname, err := serviceaccount.SplitUsername(user)
			if err != nil || len(validation.IsDNS1123Label(sns)) > 0 || len(validation.IsDNS1123Subdomain(sname)) > 0 {
				t.Fatalf("valid project derived malformed username %q (%v)", user, err)
			}
		}
	})
}

// BenchmarkDeriveServiceAccount measures one derivation against a project of
// ten entries, the size the authorization gate is sized for.
func BenchmarkDeriveServiceAccount(b *testing.B) {
	var entries []dsa
	for i := range 9 {
		entries = append(entries, dsa{Server: remote, Namespace: fmt.Sprintf("team-%d-*", i), DefaultServiceAccount: "deployer"})
	}
	last := append(entries[:9:9], dsa{Server: "https://*", Namespace: "*", DefaultServiceAccount: "deployer"})
	lastNamespaced := append(entries[:9:9], dsa{Server: "https://*", Namespace: "*", DefaultServiceAccount: "argocd:deployer"})
	cases := []struct {
		name    string
		project *v1alpha1.AppProject
	}{
		{"tenth entry matches, bare name", projectWithSAs(last...)},
		{"tenth entry matches, namespace:name", projectWithSAs(lastNamespaced...)},
		{"no entry matches", projectWithSAs(entries...)},
	}
	for _, bc := range cases {
		c, err := CompileAppProject(bc.project)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("compiled/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _, _ = c.Derive(inCluster, "guestbook", "argocd")
			}
		})
	}
}

func TestAppProjectDeepCopy(t *testing.T) {
	t.Run("a deep copy shares no slice with the original", func(t *testing.T) {
		orig := projectWith(v1alpha1.AppProjectSpec{
			SourceRepos:                []string{"a"},
			Destinations:               []v1alpha1.ApplicationDestination{{Server: "s"}},
			DestinationServiceAccounts: []dsa{{Server: "s", DefaultServiceAccount: "sa"}},
			Roles:                      []v1alpha1.ProjectRole{{Name: "r", Groups: []string{"g"}}},
			NamespaceResourceWhitelist: []metav1.GroupKind{},
		})
		orig.Labels = map[string]string{"k": "v"}
		cp, ok := orig.DeepCopyObject().(*v1alpha1.AppProject)
		if !ok {
			t.Fatal("DeepCopyObject did not return an *AppProject")
		}
		if diff := cmp.Diff(orig, cp); diff != "" {
			t.Fatalf("copy differs (-orig +copy):\n%s", diff)
		}
		if cp.Spec.NamespaceResourceWhitelist == nil {
			t.Error("an empty whitelist became nil (it means all kinds when nil)")
		}
		cp.Spec.SourceRepos[0] = "changed"
		cp.Spec.Destinations[0].Server = "changed"
		cp.Spec.DestinationServiceAccounts[0].Server = "changed"
		cp.Spec.Roles[0].Groups[0] = "changed"
		cp.Labels["k"] = "changed"
		if orig.Spec.SourceRepos[0] != "a" || orig.Spec.Destinations[0].Server != "s" ||
			orig.Spec.DestinationServiceAccounts[0].Server != "s" || orig.Spec.Roles[0].Groups[0] != "g" || orig.Labels["k"] != "v" {
			t.Errorf("changing the copy changed the original: %+v", orig)
		}
	})
	t.Run("a nil project copies to nil", func(t *testing.T) {
		var p *v1alpha1.AppProject
		if p.DeepCopy() != nil || p.DeepCopyObject() != nil {
			t.Error("want nil")
		}
	})
}

func TestSaSafeMatch(t *testing.T) {
	t.Run("a panic inside gobwas/glob becomes an error", func(t *testing.T) {
		g, err := glob.Compile("0{}")
		if err != nil {
			t.Fatal(err)
		}
		matched, err := saSafeMatch(g, "0{}", "0")
		if matched || err == nil || !strings.Contains(err.Error(), `glob pattern "0{}" failed to match "0"`) {
			t.Fatalf("got (%v, %v), want a recovered error", matched, err)
		}
	})
	t.Run("a working glob matches normally", func(t *testing.T) {
		g := glob.MustCompile("guestbook-*")
		if matched, err := saSafeMatch(g, "guestbook-*", "guestbook-dev"); !matched || err != nil {
			t.Fatalf("got (%v, %v), want (true, nil)", matched, err)
		}
	})
}

func TestValidateAppProjectRefusesSystemGroupsInRoles(t *testing.T) {
	p := &v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{Roles: []v1alpha1.ProjectRole{
		{Name: "ci", Groups: []string{"team-a-ci", "system:masters"}},
	}}}
	errs, _ := ValidateAppProject(p)
	if len(errs) != 1 || errs[0].Field != "spec.roles[0].groups[1]" || !strings.Contains(errs[0].Error(), "system:masters is cluster-admin") {
		t.Errorf("errors %v, want one for spec.roles[0].groups[1]", errs)
	}
}

// deriveServiceAccount is CompiledProject.Derive for a project that is not
// compiled ahead, the reference the tests compare the compiled derivation
// with: it compiles the patterns of the entries it walks on every call and,
// unlike CompileAppProject but like upstream, accepts patterns that do not
// compile and fails only when the walk reaches such an entry. A nil project
// matches nothing.
func deriveServiceAccount(p *v1alpha1.AppProject, destServer, destNamespace, appNamespace string) (username string, entryIndex int, err error) {
	if p == nil {
		return "", -1, nil
	}
	if err := saCheckInputs(destServer, destNamespace, appNamespace); err != nil {
		return "", -1, err
	}
	for i, raw := range p.Spec.DestinationServiceAccounts {
		var e saEntry
		e.server, e.serverErr = saCompilePattern(raw.Server)
		e.namespace, e.namespaceErr = saCompilePattern(raw.Namespace)
		matched, err := e.matches(destServer, destNamespace)
		if err != nil {
			return "", i, err
		}
		if !matched {
			continue
		}
		e.compileServiceAccount(raw.DefaultServiceAccount)
		ns, name, err := e.resolve(destNamespace, appNamespace)
		if err != nil {
			return "", i, err
		}
		return e.usernameFor(ns, name), i, nil
	}
	return "", -1, nil
}
