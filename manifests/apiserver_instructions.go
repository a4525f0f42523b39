package manifests

import (
	"fmt"
	"path/filepath"
	"strings"
)

// APIServerInstructions returns the steps an operator takes to install the
// files APIServerFiles renders for opts: copy them from outDir to opts.Dir on
// each control-plane node, change kube-apiserver's flags (APIServerFlags),
// then apply the CRD and the ValidatingWebhookConfiguration; and what
// happens while deputy is unreachable. outDir is where the files were
// written, as the operator should type it; "" means the directory the text
// is read in (ReadmeFile). Invalid options are not reported here
// (APIServerFiles does); defaults are applied.
func APIServerInstructions(opts APIServerOptions, outDir string) string {
	o, base, _ := opts.complete()
	if base == "" {
		base = opts.URL
	}
	return instructions(o, base, outDir)
}

func instructions(o APIServerOptions, base, outDir string) string {
	dir := o.Dir
	local := func(name string) string {
		if outDir == "" {
			return name
		}
		return filepath.Join(outDir, name)
	}
	from := "these files"
	if outDir != "" {
		outDir = filepath.Clean(outDir)
		from = "these files from " + outDir + "/"
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("Point kube-apiserver at deputy (%s):", base)
	p("")
	copied := []string{AuthorizationConfigFile, AuthorizationKubeconfigFile, AuthenticationKubeconfigFile}
	if o.LegacyFlags {
		copied = copied[1:]
	}
	if abs, err := filepath.Abs(outDir); outDir != "" && err == nil && filepath.ToSlash(abs) == dir {
		p("1. The files are already where kube-apiserver will read them (%s/). For another control-plane", dir)
		p("   node, copy them to the same path there, or render them again with --dir set to the node's path:")
	} else {
		p("1. Copy %s to %s/ on every control-plane node (keep the kubeconfigs mode 0600):", from, dir)
	}
	p("     %s", strings.Join(copied, "  "))
	p("2. Change kube-apiserver's flags (kubeadm and kind: /etc/kubernetes/manifests/kube-apiserver.yaml;")
	p("   the static pod also needs %s mounted as a read-only hostPath volume):", dir)
	if o.LegacyFlags {
		p("     remove --authorization-config=...   (if set: it cannot be combined with --authorization-mode)")
	} else {
		p("     remove --authorization-mode=...   (it cannot be combined with --authorization-config; Node and RBAC are in the file)")
	}
	for _, f := range apiserverFlags(o) {
		note := ""
		switch f.Name {
		case "authorization-mode":
			note = "   (keep other modes you use; Webhook after Node, before RBAC)"
		case "authorization-webhook-version":
			note = "   (the default is v1beta1; deputy answers both)"
		case "authentication-token-webhook-version":
			note = "   (optional: the default is v1beta1; deputy answers both)"
		case "authentication-token-webhook-cache-ttl":
			note = "   (optional: the default caches token answers for 2m)"
		}
		p("     add    %s%s", f, note)
	}
	p("3. When kube-apiserver is back, install the CRD, then the admission webhooks (AppProjects; Roles and ClusterRoles);")
	p("   skip this step when deputy runs in the cluster from manifests/base, which has both (docs/install.md):")
	p("     kubectl apply -f manifests/%s/%s", CRDDir, DeputyAppProjectCRDFile)
	p("     kubectl apply -f %s", local(ValidatingWebhookFile))
	p("")
	p("Tokens: kube-apiserver asks deputy to review tokens for its API audiences (--api-audiences, by default its")
	p("--service-account-issuer). deputy's static tokens are valid for deputy serve --api-audiences (default")
	p("https://kubernetes.default.svc.cluster.local): make the two agree, or tokens are rejected as unauthenticated.")
	p("kube-apiserver must reach %s from its own network namespace: cluster DNS names do not resolve there.", base)
	p("")
	p("While deputy is unreachable:")
	switch {
	case o.LegacyFlags:
		p("- the legacy flags have no failure policy and no matchConditions: every request outside system:masters")
		p("  that Node does not allow goes to deputy (kube-apiserver waits up to %s for an address that does not", LegacyWebhookTimeout)
		p("  answer), and a webhook error is no opinion: RBAC decides alone. The impersonation gate is OPEN: an")
		p("  RBAC rule granting impersonate (the built-in edit and admin roles grant it on ServiceAccounts) works")
		p("  again once deputy's cached denial expires (--authorization-webhook-cache-unauthorized-ttl). Keep no")
		p("  RBAC rule granting impersonate without resourceNames, or use --authorization-config.")
	default:
		if o.ImpersonationFailurePolicy == FailurePolicyDeny {
			p("- impersonation is denied (%s, failurePolicy Deny): the gate stays closed;", ImpersonationAuthorizerName)
		} else {
			p("- impersonation is what RBAC allows (%s, failurePolicy NoOpinion): the gate is OPEN;", ImpersonationAuthorizerName)
		}
		if o.FailurePolicy == FailurePolicyNoOpinion {
			p("- everything else is what Node and RBAC allow (%s, failurePolicy NoOpinion): deputy's own allows", AuthorizerName)
			p("  and denials are not in force;")
		} else {
			p("- everything else is denied (%s, failurePolicy Deny) but for what never waits for deputy;", AuthorizerName)
		}
		p("- never sent to deputy except for impersonation, so never waiting for it: system:masters, system:nodes,")
		p("  system:serviceaccounts:kube-system, %s, deputy's ServiceAccount %s,", strings.Join(controlPlaneUsers, ", "), o.ServiceAccount)
		p("  and kube-apiserver's /healthz, /livez, /readyz (and below) and /version.")
	}
	p("- AppProject writes fail (%s, failurePolicy Fail) and Roles and ClusterRoles are", AppProjectWebhookName)
	p("  admitted unchecked (%s, failurePolicy Ignore: an outage must not block RBAC writes;", ImpersonationRBACWebhookName)
	p("  deputy's impersonation gate ignores rules without resourceNames either way).")
	return b.String()
}
