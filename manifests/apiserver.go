package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/certs"
	policyv1alpha1 "deputy.dev/deputy/policy/v1alpha1"
)

// Names of the files APIServerFiles renders.
const (
	// AuthorizationKubeconfigFile tells kube-apiserver's Webhook authorizer how
	// to reach deputy (URL + AuthorizePath); referenced from
	// AuthorizationConfigFile.
	AuthorizationKubeconfigFile = "authorization-webhook.kubeconfig"
	// AuthenticationKubeconfigFile is the value of kube-apiserver's
	// --authentication-token-webhook-config-file (URL + AuthenticatePath).
	AuthenticationKubeconfigFile = "authentication-webhook.kubeconfig"
	// AuthorizationConfigFile is the value of kube-apiserver's
	// --authorization-config: an apiserver.config.k8s.io/v1 AuthorizationConfiguration.
	AuthorizationConfigFile = "authorization-config.yaml"
	// ValidatingWebhookFile is the admissionregistration.k8s.io/v1
	// ValidatingWebhookConfiguration for AppProjects and for Roles and
	// ClusterRoles, applied with kubectl.
	ValidatingWebhookFile = "validatingwebhook.yaml"
	// ReadmeFile holds APIServerInstructions.
	ReadmeFile = "README.txt"
)

// Paths under deputy's base URL that kube-apiserver calls. The webhook
// package must serve these.
const (
	// AuthorizePath receives SubjectAccessReviews.
	AuthorizePath = "/authorize"
	// AuthenticatePath receives TokenReviews.
	AuthenticatePath = "/authenticate"
	// ValidatePath receives AdmissionReviews for AppProjects, Roles and
	// ClusterRoles.
	ValidatePath = "/validate"
)

// Defaults and limits of APIServerOptions.
const (
	// DefaultAuthorizationTimeout is the webhook authorizer's timeout.
	DefaultAuthorizationTimeout = 3 * time.Second
	// MaxAuthorizationTimeout is the largest timeout kube-apiserver accepts
	// (k8s.io/apiserver/pkg/apis/apiserver/validation ValidateWebhookConfiguration).
	MaxAuthorizationTimeout = 30 * time.Second
	// DefaultAuthorizedTTL is how long kube-apiserver caches an allow.
	DefaultAuthorizedTTL = 30 * time.Second
	// DefaultUnauthorizedTTL is how long kube-apiserver caches a deny or no-opinion.
	DefaultUnauthorizedTTL = 10 * time.Second
	// FailurePolicyDeny denies a request when deputy cannot be reached (fail
	// closed): the default of the impersonation webhook.
	FailurePolicyDeny = apiserverv1.FailurePolicyDeny
	// FailurePolicyNoOpinion falls through to the next authorizer (RBAC) when
	// deputy cannot be reached; deputy's denials are then not enforced and
	// what only deputy allows is refused: the default of the webhook for
	// everything but impersonation.
	FailurePolicyNoOpinion = apiserverv1.FailurePolicyNoOpinion
	// ImpersonationAuthorizerName is the name, in the
	// AuthorizationConfiguration, of the webhook that receives only
	// impersonation checks (kube-apiserver uses it in metrics and logs).
	ImpersonationAuthorizerName = "deputy-impersonation"
	// AuthorizerName is the name of the webhook that receives everything else
	// deputy decides.
	AuthorizerName = "deputy"
	// DefaultServiceAccount is deputy's own ServiceAccount in manifests/base.
	DefaultServiceAccount = "deputy-system/deputy"
	// LegacyWebhookTimeout is the timeout kube-apiserver gives a webhook
	// configured with --authorization-webhook-config-file (not configurable).
	LegacyWebhookTimeout = 30 * time.Second
	// ValidatingWebhookConfigurationName is the name of the
	// ValidatingWebhookConfiguration object.
	ValidatingWebhookConfigurationName = "deputy"
	// AppProjectWebhookName is the name of the webhook inside it that
	// validates AppProjects (failurePolicy Fail).
	AppProjectWebhookName = "appprojects.deputy.dev"
	// ImpersonationRBACWebhookName is the name of the webhook inside it that
	// checks Roles and ClusterRoles for impersonation rules without
	// resourceNames (failurePolicy Ignore).
	ImpersonationRBACWebhookName = "impersonation-rbac.deputy.dev"
	// admissionTimeoutSeconds is the AppProject webhook's timeout.
	admissionTimeoutSeconds = 10
	// impersonationRBACTimeoutSeconds is the RBAC webhook's timeout: it fails
	// open, so a slow deputy delays a role write by at most this long.
	impersonationRBACTimeoutSeconds = 5
)

// File is one rendered file.
type File struct {
	// Name is the base file name, e.g. AuthorizationConfigFile.
	Name string
	// Data is the content.
	Data []byte
	// Mode is the permission to write it with: 0600 for files holding the
	// client key, 0644 otherwise.
	Mode os.FileMode
}

// APIServerOptions say how kube-apiserver reaches deputy.
type APIServerOptions struct {
	// URL is deputy's base URL as kube-apiserver reaches it: https://HOST[:PORT]
	// with no path (or "/"), query, fragment or credentials. Required.
	URL string
	// CA is the PEM CA bundle that verifies deputy's serving certificate
	// (certs.CACertFile). Required.
	CA []byte
	// ClientCert and ClientKey are the PEM client certificate and key
	// kube-apiserver presents to deputy (certs.ClientCertFile/ClientKeyFile).
	// Required.
	ClientCert []byte
	ClientKey  []byte
	// AuthorizationTimeout is the webhook authorizers' timeout; 0 means
	// DefaultAuthorizationTimeout, at most MaxAuthorizationTimeout. Not with
	// LegacyFlags (kube-apiserver then uses LegacyWebhookTimeout).
	AuthorizationTimeout time.Duration
	// ImpersonationFailurePolicy is what kube-apiserver decides for an
	// impersonation check when deputy fails: FailurePolicyDeny (the default
	// when empty; the gate stays closed) or FailurePolicyNoOpinion (RBAC
	// decides alone). Not with LegacyFlags.
	ImpersonationFailurePolicy string
	// FailurePolicy is the same for everything else deputy decides:
	// FailurePolicyNoOpinion (the default when empty) or FailurePolicyDeny.
	// Not with LegacyFlags.
	FailurePolicy string
	// ServiceAccount is deputy's own ServiceAccount, namespace/name (default
	// DefaultServiceAccount): its requests other than impersonation are never
	// sent to deputy.
	ServiceAccount string
	// LegacyFlags renders for kube-apiserver's --authorization-mode and
	// --authorization-webhook-* flags instead of an AuthorizationConfiguration
	// (APIServerFiles then leaves out AuthorizationConfigFile): one webhook
	// for every request, no matchConditions, and a webhook error is no
	// opinion, so the gate is open while deputy is unreachable.
	LegacyFlags bool
	// AuthorizedTTL and UnauthorizedTTL are kube-apiserver's cache lifetimes
	// for deputy's answers; 0 means DefaultAuthorizedTTL/DefaultUnauthorizedTTL.
	AuthorizedTTL   time.Duration
	UnauthorizedTTL time.Duration
	// Dir is the absolute directory on the control-plane node where the files
	// will live; AuthorizationConfigFile refers to the kubeconfig there, and the
	// instructions name the flags with it. Required.
	Dir string
}

// complete returns o with defaults applied and the parsed base URL (no
// trailing slash), or every problem found.
func (o APIServerOptions) complete() (APIServerOptions, string, error) {
	var errs []error
	base, err := baseURL(o.URL)
	if err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.LegacyFlags && o.AuthorizationTimeout != 0:
		errs = append(errs, fmt.Errorf("timeout %s cannot be set with the legacy flags: kube-apiserver's --authorization-webhook-* flags have no timeout (it is %s); use --authorization-config for a shorter one", o.AuthorizationTimeout, LegacyWebhookTimeout))
	case o.LegacyFlags:
		o.AuthorizationTimeout = LegacyWebhookTimeout
	case o.AuthorizationTimeout == 0:
		o.AuthorizationTimeout = DefaultAuthorizationTimeout
	case o.AuthorizationTimeout < 0 || o.AuthorizationTimeout > MaxAuthorizationTimeout:
		errs = append(errs, fmt.Errorf("timeout %s is out of range: kube-apiserver accepts more than 0s and at most %s", o.AuthorizationTimeout, MaxAuthorizationTimeout))
	}
	if o.AuthorizedTTL == 0 {
		o.AuthorizedTTL = DefaultAuthorizedTTL
	}
	if o.AuthorizedTTL < 0 {
		errs = append(errs, fmt.Errorf("authorized TTL %s must be positive", o.AuthorizedTTL))
	}
	if o.UnauthorizedTTL == 0 {
		o.UnauthorizedTTL = DefaultUnauthorizedTTL
	}
	if o.UnauthorizedTTL < 0 {
		errs = append(errs, fmt.Errorf("unauthorized TTL %s must be positive", o.UnauthorizedTTL))
	}
	if o.LegacyFlags && (o.FailurePolicy != "" || o.ImpersonationFailurePolicy != "") {
		errs = append(errs, errors.New("failure policies cannot be set with the legacy flags: kube-apiserver's --authorization-webhook-* flags have none (a webhook error is no opinion); use --authorization-config for a gate that stays closed"))
	}
	if o.ImpersonationFailurePolicy, err = failurePolicy("impersonation failure policy", o.ImpersonationFailurePolicy, FailurePolicyDeny); err != nil {
		errs = append(errs, err)
	}
	if o.FailurePolicy, err = failurePolicy("failure policy", o.FailurePolicy, FailurePolicyNoOpinion); err != nil {
		errs = append(errs, err)
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = DefaultServiceAccount
	}
	if ns, name, ok := strings.Cut(o.ServiceAccount, "/"); !ok || validation.IsDNS1123Label(ns) != nil || validation.IsDNS1123Subdomain(name) != nil {
		errs = append(errs, fmt.Errorf("deputy's ServiceAccount %q must be namespace/name (a namespace and a ServiceAccount name), e.g. %s", o.ServiceAccount, DefaultServiceAccount))
	}
	// The node's paths are POSIX paths whatever OS renders them.
	switch {
	case o.Dir == "":
		errs = append(errs, errors.New("the directory on the control-plane node is empty: give the absolute path the files will be copied to"))
	case !path.IsAbs(o.Dir):
		errs = append(errs, fmt.Errorf("the directory on the control-plane node %q must be an absolute path (kube-apiserver requires absolute kubeconfig paths)", o.Dir))
	default:
		o.Dir = path.Clean(o.Dir)
	}
	if len(o.CA) == 0 {
		errs = append(errs, errors.New("the CA bundle is empty"))
	} else if _, err := certutil.ParseCertsPEM(o.CA); err != nil {
		errs = append(errs, fmt.Errorf("the CA bundle is not PEM certificates: %w", err))
	}
	if len(o.ClientCert) == 0 {
		errs = append(errs, errors.New("the client certificate is empty"))
	} else if _, err := certutil.ParseCertsPEM(o.ClientCert); err != nil {
		errs = append(errs, fmt.Errorf("the client certificate is not a PEM certificate: %w", err))
	}
	if len(o.ClientKey) == 0 {
		errs = append(errs, errors.New("the client key is empty"))
	} else if _, err := keyutil.ParsePrivateKeyPEM(o.ClientKey); err != nil {
		errs = append(errs, fmt.Errorf("the client key is not a PEM private key: %w", err))
	}
	return o, base, errors.Join(errs...)
}

// failurePolicy validates a failure policy, returning def for "".
func failurePolicy(what, p, def string) (string, error) {
	switch p {
	case "":
		return def, nil
	case FailurePolicyDeny, FailurePolicyNoOpinion:
		return p, nil
	}
	return p, fmt.Errorf("%s %q is not supported: use %s or %s", what, p, FailurePolicyDeny, FailurePolicyNoOpinion)
}

// serviceAccountUser is the user name of deputy's ServiceAccount (o
// completed).
func (o APIServerOptions) serviceAccountUser() string {
	ns, name, _ := strings.Cut(o.ServiceAccount, "/")
	return serviceaccount.MakeUsername(ns, name)
}

// baseURL validates deputy's base URL and returns it without a trailing slash.
func baseURL(raw string) (string, error) {
	const want = "use https://HOST:PORT, the address at which kube-apiserver reaches deputy"
	if raw == "" {
		return "", fmt.Errorf("url is empty: %s", want)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q does not parse (%v): %s", raw, err, want)
	}
	switch {
	case u.Scheme != "https":
		return "", fmt.Errorf("url %q must use https (kube-apiserver calls webhooks over TLS): %s", raw, want)
	case u.Opaque != "" || u.Hostname() == "":
		return "", fmt.Errorf("url %q has no host: %s", raw, want)
	case u.User != nil:
		return "", fmt.Errorf("url %q must not contain credentials: kube-apiserver authenticates with the client certificate", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", fmt.Errorf("url %q must not have a query or fragment: %s", raw, want)
	case u.Path != "" && u.Path != "/":
		return "", fmt.Errorf("url %q must not have a path (deputy serves %s, %s and %s at its root): %s", raw, AuthorizePath, AuthenticatePath, ValidatePath, want)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("url %q has an invalid port %q: %s", raw, p, want)
		}
	}
	return "https://" + u.Host, nil
}

// APIServerFiles renders the files that point kube-apiserver at deputy, in
// this order: AuthorizationKubeconfigFile and AuthenticationKubeconfigFile
// (kubeconfigs with the server URL + AuthorizePath/AuthenticatePath, the CA and
// the client certificate and key embedded; mode 0600), AuthorizationConfigFile
// (an apiserver.config.k8s.io/v1 AuthorizationConfiguration: Node, deputy's
// impersonation webhook, deputy's webhook for everything else, RBAC; see
// mastersMatchCondition; left out with LegacyFlags), ValidatingWebhookFile
// (two webhooks calling ValidatePath: AppProject CREATE/UPDATE in
// argoproj.io and deputy.dev with failurePolicy Fail, and Role/ClusterRole
// CREATE/UPDATE in rbac.authorization.k8s.io/v1 with failurePolicy Ignore)
// and ReadmeFile (APIServerInstructions).
//
// Field names and limits follow k8s.io/apiserver/pkg/apis/apiserver/v1 and
// its validation package; the output is deterministic for equal input.
//
// Errors: every invalid option at once (URL, durations, failure policies,
// ServiceAccount, Dir, PEM inputs, options the legacy flags cannot carry),
// each naming the option and the fix.
func APIServerFiles(opts APIServerOptions) ([]File, error) {
	o, base, err := opts.complete()
	if err != nil {
		return nil, err
	}
	authzKubeconfig, err := webhookKubeconfig(base+AuthorizePath, o)
	if err != nil {
		return nil, err
	}
	authnKubeconfig, err := webhookKubeconfig(base+AuthenticatePath, o)
	if err != nil {
		return nil, err
	}
	admission, err := validatingWebhook(base+ValidatePath, o)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Name: AuthorizationKubeconfigFile, Data: authzKubeconfig, Mode: 0o600},
		{Name: AuthenticationKubeconfigFile, Data: authnKubeconfig, Mode: 0o600},
	}
	if !o.LegacyFlags {
		authzConfig, err := authorizationConfig(o)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: AuthorizationConfigFile, Data: authzConfig, Mode: 0o644})
	}
	return append(files,
		File{Name: ValidatingWebhookFile, Data: admission, Mode: 0o644},
		File{Name: ReadmeFile, Data: []byte(instructions(o, base, "")), Mode: 0o644},
	), nil
}

// Flag is one kube-apiserver command-line flag.
type Flag struct {
	Name, Value string
}

// String is the flag as typed: --name=value.
func (f Flag) String() string { return "--" + f.Name + "=" + f.Value }

// APIServerFlags returns the kube-apiserver flags (names of kube-apiserver
// 1.37, k8s.io/kubernetes pkg/kubeapiserver/options) that make it use the
// files APIServerFiles renders for opts, in the files' directory opts.Dir:
// --authorization-config, or with LegacyFlags --authorization-mode (Node
// first, then Webhook, then RBAC: Node never allows an impersonation check,
// so the gate still comes before RBAC), --authorization-webhook-config-file,
// -version and the cache TTLs; then the token webhook's flags.
//
// Errors: those of APIServerFiles for invalid options.
func APIServerFlags(opts APIServerOptions) ([]Flag, error) {
	o, _, err := opts.complete()
	if err != nil {
		return nil, err
	}
	return apiserverFlags(o), nil
}

func apiserverFlags(o APIServerOptions) []Flag {
	var flags []Flag
	if o.LegacyFlags {
		flags = []Flag{
			{"authorization-mode", "Node,Webhook,RBAC"},
			{"authorization-webhook-config-file", path.Join(o.Dir, AuthorizationKubeconfigFile)},
			{"authorization-webhook-version", "v1"},
			{"authorization-webhook-cache-authorized-ttl", o.AuthorizedTTL.String()},
			{"authorization-webhook-cache-unauthorized-ttl", o.UnauthorizedTTL.String()},
		}
	} else {
		flags = []Flag{{"authorization-config", path.Join(o.Dir, AuthorizationConfigFile)}}
	}
	return append(flags,
		Flag{"authentication-token-webhook-config-file", path.Join(o.Dir, AuthenticationKubeconfigFile)},
		Flag{"authentication-token-webhook-version", "v1"},
		Flag{"authentication-token-webhook-cache-ttl", "30s"},
	)
}

func header(lines ...string) []byte {
	var b bytes.Buffer
	b.WriteString("# Generated by \"deputy config apiserver\"; regenerate rather than edit.\n")
	for _, l := range lines {
		b.WriteString("# " + l + "\n")
	}
	return b.Bytes()
}

func webhookKubeconfig(server string, o APIServerOptions) ([]byte, error) {
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			"deputy": {Server: server, CertificateAuthorityData: o.CA},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{
			"kube-apiserver": {ClientCertificateData: o.ClientCert, ClientKeyData: o.ClientKey},
		},
		Contexts: map[string]*clientcmdapi.Context{
			"deputy": {Cluster: "deputy", AuthInfo: "kube-apiserver"},
		},
		CurrentContext: "deputy",
	}
	data, err := clientcmd.Write(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to render kubeconfig for %s: %w", server, err)
	}
	return append(header("kube-apiserver calls deputy at "+server+" with this (it holds a private key: keep it 0600)."), data...), nil
}

// The AppProject webhook fails closed: an AppProject deputy has not validated
// must not get in. The RBAC webhook fails open (Ignore): it checks every Role
// and ClusterRole write in the cluster, including kube-apiserver's own
// bootstrap roles at start-up and kube-controller-manager's aggregation, so a
// deputy outage must not block them; and it only warns by default (gateRBAC:
// Warn). Missing the check costs little: deputy's strict impersonation gate
// ignores rules without resourceNames whether or not they were admitted.
func validatingWebhook(endpoint string, o APIServerOptions) ([]byte, error) {
	fail := admissionregistrationv1.Fail
	ignore := admissionregistrationv1.Ignore
	equivalent := admissionregistrationv1.Equivalent
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(admissionTimeoutSeconds)
	rbacTimeout := int32(impersonationRBACTimeoutSeconds)
	scope := admissionregistrationv1.NamespacedScope
	allScopes := admissionregistrationv1.AllScopes
	cfg := admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ValidatingWebhookConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         AppProjectWebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &endpoint, CABundle: o.CA},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{policyv1alpha1.ArgoCDGroup, policyv1alpha1.Group},
					APIVersions: []string{policyv1alpha1.Version},
					Resources:   []string{"appprojects"},
					Scope:       &scope,
				},
			}},
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}, {
			Name:         ImpersonationRBACWebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &endpoint, CABundle: o.CA},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{rbacv1.GroupName},
					APIVersions: []string{"v1"},
					Resources:   []string{"roles", "clusterroles"},
					Scope:       &allScopes,
				},
			}},
			FailurePolicy:           &ignore,
			MatchPolicy:             &equivalent,
			SideEffects:             &none,
			TimeoutSeconds:          &rbacTimeout,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to render ValidatingWebhookConfiguration: %w", err)
	}
	return append(header(
		"Apply after the CRDs: kubectl apply -f "+ValidatingWebhookFile,
		AppProjectWebhookName+": failurePolicy Fail: while deputy is unreachable, AppProject writes are rejected.",
		ImpersonationRBACWebhookName+": failurePolicy Ignore: while deputy is unreachable, Roles and ClusterRoles",
		"  are admitted unchecked, so an outage never blocks RBAC writes (kube-apiserver's bootstrap roles,",
		"  kube-controller-manager's aggregation). deputy's strict impersonation gate ignores impersonation",
		"  rules without resourceNames either way; this webhook warns about them (gateRBAC: Warn) or denies them (Deny).",
	), data...), nil
}

// WriteFiles writes files into dir, creating dir with mode 0700 if needed.
// Each file is written atomically (temporary file and rename) with its Mode,
// replacing an existing file. It returns the written paths in order.
//
// Errors name the path; files written before an error stay written.
func WriteFiles(dir string, files []File) ([]string, error) {
	if dir == "" {
		return nil, errors.New("output directory is empty: give the directory to write the files to")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create output directory: %w", err)
	}
	var paths []string
	for _, f := range files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) {
			return paths, fmt.Errorf("file name %q must be a plain file name", f.Name)
		}
		p := filepath.Join(dir, f.Name)
		if err := certs.WriteFileAtomic(p, f.Data, f.Mode); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
