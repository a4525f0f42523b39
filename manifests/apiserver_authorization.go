package manifests

import (
	"fmt"
	"path"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"
)

// The authorization chain APIServerFiles renders, in order:
//
//  1. Node: kubelets' own requests, decided without a webhook. It only ever
//     answers Allow or NoOpinion, and never allows an impersonation check
//     (its rules name verbs explicitly, none of them impersonate*), so it
//     cannot pre-empt the gate.
//  2. ImpersonationAuthorizerName, failurePolicy Deny: exactly the
//     impersonation checks deputy's gate decides (impersonationExpression),
//     from everyone but system:masters. The gate is closed while deputy is
//     unreachable.
//  3. AuthorizerName, failurePolicy NoOpinion: everything else, except what
//     must never wait for deputy (availabilityConditions); while deputy is
//     unreachable RBAC decides alone.
//  4. RBAC.
//
// kube-apiserver allows system:masters before any configured authorizer;
// the masters condition only states that and saves a call should it change.
const mastersMatchCondition = "!('system:masters' in request.groups)"

// impersonationModes are the constrained impersonation modes of
// kube-apiserver 1.37 (k8s.io/apiserver/pkg/endpoints/filters/impersonation
// mode.go) with the resources each impersonate:<mode> check names, all in
// group authentication.k8s.io: the modes deputy's gate knows.
var impersonationModes = []struct {
	mode      string
	resources []string
}{
	{"serviceaccount", []string{"serviceaccounts"}},
	{"user-info", []string{"users", "groups", "uids", "userextras"}},
	{"arbitrary-node", []string{"nodes"}},
	{"associated-node", []string{"nodes"}},
}

// impersonationExpression is true for exactly the checks deputy's gate
// decides (authorizer/impersonation.go classifyImpersonation; the unit
// tests compare the two): legacy impersonate on users, groups, serviceaccounts (group "")
// and uids, userextras/<key> (authentication.k8s.io); impersonate:<mode> on
// that mode's resources in authentication.k8s.io; impersonate-on:<mode>:<verb>
// on any resource or path.
func impersonationExpression() string {
	var modes, constrained []string
	for _, m := range impersonationModes {
		modes = append(modes, m.mode)
		constrained = append(constrained, fmt.Sprintf("(ra.verb == 'impersonate:%s' && ra.resource %s)", m.mode, celIn(m.resources)))
	}
	onVerb := fmt.Sprintf("'^impersonate-on:(%s):[^:]+$'", strings.Join(modes, "|"))
	e := `has(request.resourceAttributes) ? (
  (ra.verb == 'impersonate' && (ra.subresource == '' || ra.resource == 'userextras') && (
    (ra.group == '' && ra.resource in ['users', 'groups', 'serviceaccounts']) ||
    (ra.group == 'authentication.k8s.io' && ra.resource in ['uids', 'userextras']))) ||
  (ra.group == 'authentication.k8s.io' && (ra.subresource == '' || ra.resource == 'userextras') && (
    ` + strings.Join(constrained, " ||\n    ") + `)) ||
  ra.verb.matches(` + onVerb + `)
) : has(request.nonResourceAttributes) && request.nonResourceAttributes.verb.matches(` + onVerb + `)`
	// Authorization matchConditions have no variables: spell the field out.
	return strings.ReplaceAll(e, "ra.", "request.resourceAttributes.")
}

// Who and what never waits for deputy: the webhook for everything but
// impersonation skips them, so they are decided by Node and RBAC alone and
// a deputy outage (or a slow deputy) cannot delay them. Their impersonation
// checks still go to the gate.
var (
	// controlPlaneUsers: kube-apiserver's loopback identity (also in
	// system:masters), the controller manager and scheduler with their own
	// credentials, and kube-proxy, which routes deputy's own Service.
	controlPlaneUsers = []string{"system:apiserver", "system:kube-controller-manager", "system:kube-scheduler", "system:kube-proxy"}
	// controlPlaneGroups: kubelets (the Node authorizer, first in the chain,
	// decides what it can) and the kube-system ServiceAccounts the
	// controllers use with --use-service-account-credentials (kubeadm's
	// default), CoreDNS and kube-proxy.
	controlPlaneGroups = []string{"system:nodes", "system:serviceaccounts:kube-system"}
	// healthPaths: kube-apiserver's health and version endpoints, which
	// probes and load balancers call anonymously (RBAC's
	// system:public-info-viewer allows them).
	healthPaths        = []string{"/healthz", "/livez", "/readyz", "/version", "/version/"}
	healthPathPrefixes = []string{"/healthz/", "/livez/", "/readyz/"}
)

// availabilityConditions are the matchConditions of the webhook for
// everything but impersonation, after the masters condition: not an
// impersonation check (the other webhook has it), not a control-plane user
// or deputy's own ServiceAccount (saUser; its list, watch and Lease requests
// must not need deputy, or cluster mode could never start), not in a
// control-plane group, not a health or version path.
func availabilityConditions(saUser string) []string {
	var prefixes []string
	for _, p := range healthPathPrefixes {
		prefixes = append(prefixes, "request.nonResourceAttributes.path.startsWith('"+p+"')")
	}
	return []string{
		"!(" + impersonationExpression() + ")",
		"!(request.user in " + celList(controlPlaneUsers) + ")",
		"request.user != '" + saUser + "'",
		"!request.groups.exists(g, g in " + celList(controlPlaneGroups) + ")",
		"!has(request.nonResourceAttributes) || !(request.nonResourceAttributes.path in " + celList(healthPaths) + " ||\n  " +
			strings.Join(prefixes, " || ") + ")",
	}
}

// celIn renders a CEL membership test: == 'v' for one value, in [...] else.
func celIn(values []string) string {
	if len(values) == 1 {
		return "== '" + values[0] + "'"
	}
	return "in " + celList(values)
}

// celList renders a CEL list of string literals. The values are constants
// of this package or a validated ServiceAccount name (no quotes).
func celList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + v + "'"
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

func authorizationConfig(o APIServerOptions) ([]byte, error) {
	kubeconfig := path.Join(o.Dir, AuthorizationKubeconfigFile)
	webhook := func(policy string, conditions []string) *apiserverv1.WebhookConfiguration {
		w := &apiserverv1.WebhookConfiguration{
			AuthorizedTTL:                            metav1.Duration{Duration: o.AuthorizedTTL},
			UnauthorizedTTL:                          metav1.Duration{Duration: o.UnauthorizedTTL},
			Timeout:                                  metav1.Duration{Duration: o.AuthorizationTimeout},
			SubjectAccessReviewVersion:               "v1",
			MatchConditionSubjectAccessReviewVersion: "v1",
			FailurePolicy:                            policy,
			ConnectionInfo: apiserverv1.WebhookConnectionInfo{
				Type:           apiserverv1.AuthorizationWebhookConnectionInfoTypeKubeConfigFile,
				KubeConfigFile: &kubeconfig,
			},
		}
		for _, c := range append([]string{mastersMatchCondition}, conditions...) {
			w.MatchConditions = append(w.MatchConditions, apiserverv1.WebhookMatchCondition{Expression: c})
		}
		return w
	}
	cfg := apiserverv1.AuthorizationConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "AuthorizationConfiguration"},
		Authorizers: []apiserverv1.AuthorizerConfiguration{
			{Type: "Node", Name: "node"},
			{
				Type:    string(apiserverv1.TypeWebhook),
				Name:    ImpersonationAuthorizerName,
				Webhook: webhook(o.ImpersonationFailurePolicy, []string{impersonationExpression()}),
			},
			{
				Type:    string(apiserverv1.TypeWebhook),
				Name:    AuthorizerName,
				Webhook: webhook(o.FailurePolicy, availabilityConditions(o.serviceAccountUser())),
			},
			{Type: "RBAC", Name: "rbac"},
		},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to render AuthorizationConfiguration: %w", err)
	}
	return append(header(
		"kube-apiserver --authorization-config="+path.Join(o.Dir, AuthorizationConfigFile)+" (replaces --authorization-mode).",
		"Authorizers are asked in order: Node; deputy's gate (impersonation checks only, failurePolicy "+o.ImpersonationFailurePolicy+");",
		"deputy (everything else but system:nodes, control-plane components, deputy's own ServiceAccount "+o.ServiceAccount+" and",
		"kube-apiserver's health and version paths, failurePolicy "+o.FailurePolicy+"); RBAC. system:masters skips both webhooks.",
	), data...), nil
}

// validatingWebhook renders the ValidatingWebhookConfiguration.
//

// DefaultAuthorizationConfig renders the AuthorizationConfiguration that
// APIServerFiles writes with default options (failure policies, timeouts,
// TTLs, deputy's ServiceAccount DefaultServiceAccount), with dir as the
// directory on the control-plane node: what `deputy replay` models when not
// given the configuration a cluster runs. No certificate is needed: the
// configuration names the webhook kubeconfig, it does not embed it.
//
// Errors: none in practice (rendering to YAML).
func DefaultAuthorizationConfig(dir string) ([]byte, error) {
	return authorizationConfig(APIServerOptions{
		Dir:                        dir,
		AuthorizationTimeout:       DefaultAuthorizationTimeout,
		AuthorizedTTL:              DefaultAuthorizedTTL,
		UnauthorizedTTL:            DefaultUnauthorizedTTL,
		FailurePolicy:              FailurePolicyNoOpinion,
		ImpersonationFailurePolicy: FailurePolicyDeny,
		ServiceAccount:             DefaultServiceAccount,
	})
}
