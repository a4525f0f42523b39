package serve

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	kauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
)

// GateOptions resolves the configuration's authorization.impersonation
// (defaults applied, see config.SetImpersonationDefaults) into the
// impersonation gate's options: impersonators by user name (a
// ServiceAccount "ns/name" as system:serviceaccount:ns:name; project
// namespaces ["*"] as every namespace), the subresource allow-list split into
// resource and subresource, exempt subjects as users and groups, and the
// protected targets. `deputy serve` and `deputy can-i` compose the same gate
// with it.
//
// Errors: an impersonator without a valid identity, naming its field.
func GateOptions(im config.Impersonation) (authorizer.GateOptions, error) {
	config.SetImpersonationDefaults(&im)
	o := authorizer.GateOptions{Strict: *im.Strict, RequireConstrained: *im.RequireConstrained}
	for i, p := range im.Impersonators {
		name, err := p.UserName()
		if err != nil {
			return authorizer.GateOptions{}, fmt.Errorf("authorization.impersonation.impersonators[%d]: %w", i, err)
		}
		namespaces := p.Projects.Namespaces
		if slices.Contains(namespaces, "*") {
			namespaces = nil // every namespace
		}
		o.Impersonators = append(o.Impersonators, authorizer.Impersonator{
			UserName: name, ClusterServer: p.ClusterServer, ClusterName: p.ClusterName,
			APIGroups: p.Projects.APIGroups, Namespaces: namespaces, ApplicationNamespaces: p.ApplicationNamespaces,
		})
	}
	for _, r := range im.Subresources {
		res, sub, _ := strings.Cut(r.Resource, "/")
		o.Subresources = append(o.Subresources, authorizer.SubresourceRule{Resource: res, Subresource: sub, Verbs: r.Verbs})
	}
	for _, s := range im.Exempt {
		switch {
		case s.User != "":
			o.ExemptUsers = append(o.ExemptUsers, s.User)
		case s.Group != "":
			o.ExemptGroups = append(o.ExemptGroups, s.Group)
		case s.ServiceAccount != "":
			ns, name, _ := strings.Cut(s.ServiceAccount, "/")
			o.ExemptUsers = append(o.ExemptUsers, serviceaccount.MakeUsername(ns, name))
		}
	}
	if pt := im.ProtectedTargets; pt != nil {
		o.ProtectedGroups, o.ProtectedUserPrefixes, o.ProtectedServiceAccountNamespaces = pt.Groups, pt.UserPrefixes, pt.ServiceAccountNamespaces
	}
	return o, nil
}

// newAuthorizer builds the authorizer of /authorize (and of deputy's API):
// the impersonation gate first, whose Deny of an impersonation is final,
// then the policy's RBAC, with authorization.defaultDecision. The gate reads
// the policy snapshot and, in cluster mode, the cluster's state; it is
// stored in gate (the cluster source refreshes it through there) and
// refreshed on every policy change. With defaultDecision Deny, the bootstrap
// grants the policy lacks are logged as warnings, now and on every change.
//
// Errors: an invalid defaultDecision or impersonation section.
func newAuthorizer(a config.Authorization, source *policy.FileSource, mode *runMode, gate *atomic.Pointer[authorizer.Gate], log *slog.Logger) (kauthorizer.Authorizer, error) {
	decision, err := authorizer.ParseDefaultDecision(a.DefaultDecision)
	if err != nil {
		return nil, err
	}
	if decision == authorizer.DefaultDeny {
		// deputy's denial is final: the policy must grant what
		// kube-apiserver's bootstrap policy grants every client.
		warnBootstrap := func(s *policy.Snapshot) {
			for _, m := range authorizer.MissingBootstrapGrants(s) {
				log.Warn("authorization.defaultDecision is Deny and the policy lacks a bootstrap grant ordinary clients need; add it from "+authorizer.BootstrapFile,
					"clusterRole", m.Grant.ClusterRole.Name, "denied", strings.Join(m.Denied, "; "))
			}
		}
		warnBootstrap(source.Current())
		source.OnChange(warnBootstrap)
	}
	gateOpts, err := GateOptions(a.Impersonation)
	if err != nil {
		return nil, err
	}
	gateOpts.RefreshResources = mode.refreshResources()
	gate.Store(authorizer.NewGate(gateOpts, source.Current, mode.clusterState()))
	source.OnChange(func(*policy.Snapshot) { gate.Load().Refresh() })
	// The gate goes first: its Deny of an impersonation must be final.
	return authorizer.Compose(authorizer.Options{Default: decision}, gate.Load(), authorizer.NewRBAC(source.Current))
}
