package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds the Project → ServiceAccount derivation: Argo CD's
// DeriveServiceAccountToImpersonate (util/settings/impersonation.go, the same
// logic as controller/sync.go deriveServiceAccountToImpersonate) over a
// CompiledProject.

// saEntry is a compiled destinationServiceAccounts entry. Errors are kept per
// entry so that the first-match walk reports them only when it reaches the
// entry, as upstream does.
type saEntry struct {
	server, namespace       saPattern
	serverErr, namespaceErr error
	saErr                   error  // defaultServiceAccount invalid (upstream or deputy rule)
	saNamespace             string // "" for the bare "name" form
	saName                  string
	username                string // precomputed for the "namespace:name" form
}

func saCompileEntry(e v1alpha1.ApplicationDestinationServiceAccount) saEntry {
	var c saEntry
	c.server, c.serverErr = saCompilePattern(e.Server)
	c.namespace, c.namespaceErr = saCompilePattern(e.Namespace)
	c.compileServiceAccount(e.DefaultServiceAccount)
	return c
}

// compileServiceAccount parses the entry's defaultServiceAccount once, so a
// derivation only picks the precomputed result.
func (c *saEntry) compileServiceAccount(sa string) {
	ns, name, upstreamInvalid, problems := saParseDefaultServiceAccount(sa)
	switch {
	case upstreamInvalid:
		c.saErr = fmt.Errorf("default service account contains invalid chars '%s'", sa)
	case len(problems) > 0:
		c.saErr = fmt.Errorf("defaultServiceAccount %q is invalid: %s", sa, strings.Join(problems, "; "))
	default:
		c.saNamespace, c.saName = ns, name
		if ns != "" {
			c.username = saUsernamePrefix + ns + ":" + name
		}
	}
}

// matches is one step of upstream's walk: a pattern that does not compile
// is an error when the walk reaches it, whether or not the other matches.
func (c *saEntry) matches(destServer, destNamespace string) (bool, error) {
	if c.serverErr != nil {
		return false, fmt.Errorf("invalid glob pattern for destination server: %w", c.serverErr)
	}
	if c.namespaceErr != nil {
		return false, fmt.Errorf("invalid glob pattern for destination namespace: %w", c.namespaceErr)
	}
	matched, err := c.server.match(destServer)
	if err != nil || !matched {
		return false, err
	}
	return c.namespace.match(destNamespace)
}

// resolve returns the ServiceAccount of a matched entry.
func (c *saEntry) resolve(destNamespace, appNamespace string) (namespace, name string, err error) {
	if c.saErr != nil {
		return "", "", c.saErr
	}
	if c.saNamespace != "" {
		return c.saNamespace, c.saName, nil
	}
	ns := destNamespace
	if ns == "" {
		ns = appNamespace
	}
	if !saIsNamespaceName(ns) {
		return "", "", saNamespaceError(destNamespace, appNamespace, c.saName)
	}
	return ns, c.saName, nil
}

// username is the ServiceAccount username of a resolved entry.
func (c *saEntry) usernameFor(namespace, name string) string {
	if c.username != "" {
		return c.username
	}
	return saUsernamePrefix + namespace + ":" + name
}

// DeriveRef is Derive returning the ServiceAccount's namespace and name
// instead of its username; it never allocates.
func (c *CompiledProject) DeriveRef(destServer, destNamespace, appNamespace string) (namespace, name string, entryIndex int, err error) {
	if err := saCheckInputs(destServer, destNamespace, appNamespace); err != nil {
		return "", "", -1, err
	}
	for i := range c.entries {
		e := &c.entries[i]
		matched, err := e.matches(destServer, destNamespace)
		if err != nil {
			return "", "", i, err
		}
		if !matched {
			continue
		}
		ns, name, err := e.resolve(destNamespace, appNamespace)
		if err != nil {
			return "", "", i, err
		}
		return ns, name, i, nil
	}
	return "", "", -1, nil
}

// Derive returns the username (system:serviceaccount:<ns>:<name>) of the
// ServiceAccount that a sync to (destServer, destNamespace) of an Application
// living in appNamespace impersonates, and the index of the
// destinationServiceAccounts entry that chose it; "" and -1 with a nil error
// when no entry matches (the caller then applies the enforcement setting,
// see EnforcedServiceAccountError).
//
// Semantics of Argo CD's DeriveServiceAccountToImpersonate (argo-cd
// util/settings/impersonation.go): entries are walked in order and the first
// whose server glob matches destServer (the resolved server URL, also when the
// Application names its cluster) and whose namespace glob matches the raw
// destNamespace wins; "namespace:name" names the ServiceAccount's namespace,
// a bare "name" lives in destNamespace, or appNamespace when destNamespace is
// empty.
//
// Errors, with the entry index: the entry reached has a glob that does not
// compile, is longer than 256 bytes or would crash gobwas/glob (upstream
// "invalid glob pattern for destination server: ..."), its
// defaultServiceAccount breaks upstream's rule (upstream "default service
// account contains invalid chars '<sa>'") or deputy's stricter one (see
// ValidateAppProject). deputy also refuses, where upstream would build a
// username the apiserver cannot parse as a ServiceAccount, a bare name whose
// namespace (destNamespace, else appNamespace) is empty or not a DNS-1123
// label; and, with index -1, a destination server longer than 2048 bytes or a
// namespace longer than 253 (no namespace is; a long input only lengthens
// worst-case matching).
func (c *CompiledProject) Derive(destServer, destNamespace, appNamespace string) (username string, entryIndex int, err error) {
	ns, name, i, err := c.DeriveRef(destServer, destNamespace, appNamespace)
	if err != nil || i < 0 {
		return "", i, err
	}
	return c.entries[i].usernameFor(ns, name), i, nil
}

// EnforcedServiceAccountError is the error that fails a sync when
// impersonation is enforced and no destinationServiceAccounts entry matches:
// upstream's "no matching service account found for destination server %s
// and namespace %s" (argo-cd util/settings/impersonation.go,
// DeriveServiceAccountToImpersonate). Upstream passes the Application's
// spec.destination.server as written (empty when the destination is given by
// name) and the ServiceAccount namespace (destination namespace, or the
// Application's namespace when that is empty). The error matches
// ErrNoMatchingServiceAccount with errors.Is.
func EnforcedServiceAccountError(server, namespace string) error {
	return &saNoMatchError{server: server, namespace: namespace}
}

type saNoMatchError struct {
	server, namespace string
}

func (e *saNoMatchError) Error() string {
	return fmt.Sprintf("no matching service account found for destination server %s and namespace %s", e.server, e.namespace)
}

func (e *saNoMatchError) Is(target error) bool { return target == ErrNoMatchingServiceAccount }

func saNamespaceError(destNamespace, appNamespace, name string) error {
	if destNamespace == "" && appNamespace == "" {
		return fmt.Errorf("cannot derive the namespace of ServiceAccount %q: the destination namespace and the Application's namespace are both empty; set spec.destination.namespace or use \"namespace:name\" in defaultServiceAccount", name)
	}
	ns := destNamespace
	if ns == "" {
		ns = appNamespace
	}
	return fmt.Errorf("cannot derive ServiceAccount %q in namespace %q: not a valid namespace name (a lowercase RFC 1123 label)", name, ns)
}

// saCheckInputs bounds the derivation's inputs (see saMaxNamespaceLength).
func saCheckInputs(destServer, destNamespace, appNamespace string) error {
	switch {
	case len(destServer) > saMaxServerLength:
		return fmt.Errorf("destination server is %d bytes long, more than the %d deputy accepts", len(destServer), saMaxServerLength)
	case len(destNamespace) > saMaxNamespaceLength:
		return fmt.Errorf("destination namespace is %d bytes long; no namespace name is longer than %d", len(destNamespace), saMaxNamespaceLength)
	case len(appNamespace) > saMaxNamespaceLength:
		return fmt.Errorf("application namespace is %d bytes long; no namespace name is longer than %d", len(appNamespace), saMaxNamespaceLength)
	}
	return nil
}

// saIsNamespaceName is validation.IsDNS1123Label without the regular
// expression and the messages, for the derivation hot path.
func saIsNamespaceName(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
