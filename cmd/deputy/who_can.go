package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	rbacv1 "k8s.io/api/rbac/v1"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

func newWhoCanCommand() *cobra.Command {
	var f canIFlags
	cmd := &cobra.Command{
		Use:   "who-can VERB (RESOURCE[.GROUP][/NAME] | NONRESOURCEURL) [-n NS] [--subresource S] [--policy PATH]... [--config FILE] [--kubeconfig FILE] [-o json]",
		Short: "List every subject the policy allows a request, with the binding and rule or the AppProject entry",
		Long: `List every subject allowed to make one request, offline: each User, Group
and ServiceAccount a binding names whose role has a rule allowing the request
(ClusterRoleBindings, and the RoleBindings of -n's namespace), with the
binding and the rule, and for impersonation checks every sync identity the
impersonation gate allows, with the AppProject entry. Every subject listed is
verified through the whole decision deputy serve makes (the gate, then RBAC,
then the default decision): a subject RBAC allows but the gate denies (a
protected target, strict mode) is listed as refused instead.

Groups are expanded where the policy can tell their members:
system:authenticated (every user and ServiceAccount the policy names but
system:anonymous), system:unauthenticated (system:anonymous),
system:serviceaccounts and system:serviceaccounts:NS. Other groups' members
come from the authenticator: they are named, not expanded.

VERB, RESOURCE, -n, --subresource, --policy, --config and --kubeconfig are
read as deputy can-i reads them. With --kubeconfig the cluster's AppProjects
and RBAC objects are read too; the cluster's RBAC (kube-apiserver's next
authorizer) allows what deputy has no opinion on. Impersonation is answered
for both checks kube-apiserver makes (constrained, then legacy).`,
		Example: `  deputy who-can list pods -n team-a --policy examples/
  deputy who-can get /healthz
  deputy who-can impersonate serviceaccounts/guestbook-deployer -n guestbook --config deputy.yaml
  deputy who-can create deployments.apps -n guestbook -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.output != "" && f.output != "json" {
				return fmt.Errorf("-o %s: the only output format is json", f.output)
			}
			attrs, d, err := requestAndDecider(cmd, args[0], args[1], &f)
			if err != nil {
				return err
			}
			opts := deputyauthz.WhoCanOptions{Gate: d.gate}
			if d.deny {
				opts.Default = deputyauthz.DefaultDeny
			}
			if d.cluster != nil {
				opts.ClusterRBAC = d.cluster.RBAC
			}
			checks := []impersonationShape{{attrs: attrs}}
			if shapes := impersonationShapes(attrs); len(shapes) > 0 {
				checks = shapes
			}
			var report []whoCanCheck
			for _, c := range checks {
				ans := deputyauthz.WhoCan(cmd.Context(), d.snap, c.attrs, opts)
				report = append(report, newWhoCanCheck(c, ans))
			}
			if f.output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			printWhoCan(cmd.OutOrStdout(), cmd.ErrOrStderr(), report)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.namespace, "namespace", "n", "", "namespace of the request (empty: cluster-scoped or all namespaces; then only ClusterRoleBindings apply)")
	fs.StringVar(&f.subresource, "subresource", "", "subresource, e.g. log or scale")
	fs.StringVar(&f.configFile, "config", "", "DeputyConfiguration file (its policy.paths are used when --policy is not given; its impersonators and protected targets configure the gate)")
	fs.StringArrayVar(&f.policy, "policy", nil, "policy file or directory; repeatable; default: the embedded examples")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "also read the cluster's AppProjects and RBAC objects, as deputy serve does in cluster mode")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	fs.StringVarP(&f.output, "output", "o", "", "json for machine-readable output")
	return cmd
}

// whoCanCheck is the answer for one check, as printed and as -o json.
type whoCanCheck struct {
	// Check names the impersonation check ("" for other requests).
	Check    string                       `json:"check,omitempty"`
	Verb     string                       `json:"verb"`
	Request  string                       `json:"request"`
	Grants   []whoCanGrant                `json:"grants"`
	Groups   []deputyauthz.GroupExpansion `json:"groups,omitempty"`
	Refused  []whoCanRefusal              `json:"refused,omitempty"`
	Warnings []string                     `json:"warnings,omitempty"`
	// ClusterWideOnly: a resource request without a namespace, for which
	// only ClusterRoleBindings are read.
	ClusterWideOnly bool `json:"clusterWideOnly,omitempty"`
}

type whoCanGrant struct {
	Subject rbacv1.Subject     `json:"subject"`
	User    string             `json:"user,omitempty"`
	Via     deputyauthz.Via    `json:"via"`
	Binding *whoCanBinding     `json:"binding,omitempty"`
	Rule    *rbacv1.PolicyRule `json:"rule,omitempty"`
	Reason  string             `json:"reason"`
}

type whoCanBinding struct {
	Kind      string         `json:"kind"`
	Name      string         `json:"name"`
	Namespace string         `json:"namespace,omitempty"`
	RoleRef   rbacv1.RoleRef `json:"roleRef"`
	Source    string         `json:"source,omitempty"`
}

type whoCanRefusal struct {
	Subject rbacv1.Subject `json:"subject"`
	Binding *whoCanBinding `json:"binding,omitempty"`
	Reason  string         `json:"reason"`
}

func bindingOf(b *policy.Binding) *whoCanBinding {
	if b == nil {
		return nil
	}
	kind := "ClusterRoleBinding"
	if b.Namespace != "" {
		kind = "RoleBinding"
	}
	return &whoCanBinding{Kind: kind, Name: b.Name, Namespace: b.Namespace, RoleRef: b.RoleRef, Source: b.Source}
}

func (b *whoCanBinding) String() string {
	if b.Namespace == "" {
		return fmt.Sprintf("%s %q of %s %q", b.Kind, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
	}
	return fmt.Sprintf("%s %q of %s %q", b.Kind, b.Name+"/"+b.Namespace, b.RoleRef.Kind, b.RoleRef.Name)
}

func newWhoCanCheck(c impersonationShape, ans deputyauthz.WhoCanAnswer) whoCanCheck {
	out := whoCanCheck{Check: c.name, Verb: c.attrs.Verb, Request: strings.TrimSuffix(describeAttributes(c.attrs), fmt.Sprintf(" for user %q", c.attrs.User.GetName())),
		Grants: []whoCanGrant{}, Groups: ans.Groups, ClusterWideOnly: c.attrs.ResourceRequest && c.attrs.Namespace == ""}
	for _, g := range ans.Grants {
		out.Grants = append(out.Grants, whoCanGrant{Subject: g.Subject, User: g.UserName, Via: g.Via, Binding: bindingOf(g.Binding), Rule: g.Rule, Reason: g.Reason})
	}
	for _, r := range ans.Refused {
		out.Refused = append(out.Refused, whoCanRefusal{Subject: r.Subject, Binding: bindingOf(r.Binding), Reason: r.Reason})
	}
	seen := map[string]bool{}
	for _, w := range ans.Warnings {
		if s := w.Error(); !seen[s] {
			seen[s] = true
			out.Warnings = append(out.Warnings, s)
		}
	}
	return out
}

// subjectString is kind/name, ServiceAccounts kind/namespace/name.
func subjectString(s rbacv1.Subject) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		return s.Kind + "/" + s.Namespace + "/" + s.Name
	}
	return s.Kind + "/" + s.Name
}

// printWhoCan writes the table of each check, the group expansions, the
// refused subjects, and the warnings (to errOut).
func printWhoCan(out, errOut io.Writer, report []whoCanCheck) {
	for i, c := range report {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if c.Check != "" {
			fmt.Fprintf(out, "%s (%s):\n", c.Check, c.Verb)
		}
		if len(c.Grants) == 0 {
			fmt.Fprintf(out, "nobody may %s\n", c.Request)
			if c.ClusterWideOnly {
				fmt.Fprintln(out, "(cluster-wide only: without -n NS no RoleBinding is read, as kube-apiserver reads none for a request without a namespace)")
			}
		} else {
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SUBJECT\tVIA\tRULE")
			for _, g := range c.Grants {
				fmt.Fprintf(w, "%s\t%s\t%s\n", subjectString(g.Subject), grantVia(g), grantRule(g))
			}
			_ = w.Flush()
		}
		for _, g := range c.Groups {
			if !g.Known {
				fmt.Fprintf(out, "group %s: %s\n", g.Group, g.Description)
				continue
			}
			members := "none named in the policy"
			if len(g.Members) > 0 {
				members = strings.Join(g.Members, ", ")
			}
			fmt.Fprintf(out, "group %s (%s): %s\n", g.Group, g.Description, members)
		}
		for _, r := range c.Refused {
			via := ""
			if r.Binding != nil {
				via = " (" + r.Binding.String() + " matches)"
			}
			fmt.Fprintf(out, "not allowed: %s%s: %s\n", subjectString(r.Subject), via, r.Reason)
		}
		for _, w := range c.Warnings {
			fmt.Fprintf(errOut, "warning: %s\n", w)
		}
	}
}

func grantVia(g whoCanGrant) string {
	switch {
	case g.Via == deputyauthz.ViaGate:
		return strings.TrimPrefix(g.Reason, "deputy impersonation gate: ")
	case g.Via == deputyauthz.ViaClusterRBAC:
		return "cluster RBAC (after deputy's no opinion): " + g.Binding.String()
	}
	return g.Binding.String()
}

func grantRule(g whoCanGrant) string {
	if g.Rule == nil {
		return "-"
	}
	return deputyauthz.DescribeRule(g.Rule)
}
