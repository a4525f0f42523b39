package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	rbacutil "k8s.io/kubectl/pkg/util/rbac"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// canIList is `deputy can-i --list`'s answer, as printed and as -o json.
type canIList struct {
	User      string   `json:"user"`
	Groups    []string `json:"groups"`
	Namespace string   `json:"namespace,omitempty"`
	// Rules are kubectl auth can-i --list's rows (each rule broken down per
	// resource and verb, then compacted as kubectl does), per binding.
	Rules         []canIListRule                  `json:"rules"`
	Warnings      []string                        `json:"warnings,omitempty"`
	Impersonation deputyauthz.ImpersonationRights `json:"impersonation"`
}

type canIListRule struct {
	rbacv1.PolicyRule `json:",inline"`
	Binding           string `json:"binding"`
	Cluster           bool   `json:"clusterRBAC,omitempty"`
}

// runCanIList answers can-i --list: the rules of every binding that applies
// to --as (deputy's, then with --kubeconfig and default decision NoOpinion
// the cluster's), and what the gate lets it impersonate.
func runCanIList(cmd *cobra.Command, f *canIFlags) error {
	if f.output != "" && f.output != "json" {
		return fmt.Errorf("-o %s: the only output format is json", f.output)
	}
	d, err := loadDecider(cmd.Context(), f)
	if err != nil {
		return err
	}
	u := &user.DefaultInfo{Name: f.as, Groups: deputyauthz.AuthenticatedGroups(f.as, f.asGroups)}
	list := canIList{User: u.Name, Groups: u.Groups, Namespace: f.namespace, Rules: []canIListRule{}}
	add := func(snap *policy.Snapshot, cluster bool) {
		rules, errs := deputyauthz.RulesFor(snap, u, f.namespace)
		list.Rules = append(list.Rules, compactPerBinding(rules, cluster)...)
		for _, e := range errs {
			list.Warnings = append(list.Warnings, e.Error())
		}
	}
	add(d.snap, false)
	if d.cluster != nil && !d.deny {
		// kube-apiserver's next authorizer decides what deputy has no opinion on.
		add(&policy.Snapshot{RBAC: d.cluster.RBAC}, true)
	}
	slices.SortStableFunc(list.Rules, func(a, b canIListRule) int { return strings.Compare(a.String(), b.String()) })
	list.Impersonation = d.gate.RightsOf(u)
	if f.output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	printCanIList(cmd.OutOrStdout(), cmd.ErrOrStderr(), &list)
	return nil
}

// compactPerBinding breaks every rule down and compacts it again as kubectl
// auth can-i --list does (k8s.io/kubectl/pkg/util/rbac), within each
// binding, so that every row keeps the binding it comes from.
func compactPerBinding(rules []deputyauthz.RuleGrant, cluster bool) []canIListRule {
	var out []canIListRule
	for start := 0; start < len(rules); {
		end := start
		var broken []rbacv1.PolicyRule
		for ; end < len(rules) && rules[end].Binding == rules[start].Binding; end++ {
			broken = append(broken, rbacutil.BreakdownRule(*rules[end].Rule)...)
		}
		compact, _ := rbacutil.CompactRules(broken) // never fails
		binding := strings.TrimPrefix(rules[start].Reason(), "RBAC: allowed by ")
		for _, r := range compact {
			out = append(out, canIListRule{PolicyRule: r, Binding: binding, Cluster: cluster})
		}
		start = end
	}
	return out
}

func printCanIList(out, errOut io.Writer, list *canIList) {
	for _, w := range list.Warnings {
		fmt.Fprintf(errOut, "warning: the list may be incomplete: %s\n", w)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "Resources\tNon-Resource URLs\tResource Names\tVerbs\tBinding")
	for _, r := range list.Rules {
		binding := r.Binding
		if r.Cluster {
			binding = "cluster RBAC (after deputy's no opinion): " + binding
		}
		fmt.Fprintf(w, "%s\t%v\t%v\t%v\t%s\n", combineResourceGroup(r.Resources, r.APIGroups), r.NonResourceURLs, r.ResourceNames, r.Verbs, binding)
	}
	_ = w.Flush()
	imp := list.Impersonation
	fmt.Fprintf(out, "\nImpersonation through deputy's gate:\n  %s\n", imp.Summary)
	for _, p := range imp.Projects {
		fmt.Fprintf(out, "  %s\n", p.Project)
		for _, sa := range p.ServiceAccounts {
			fmt.Fprintf(out, "    destinationServiceAccounts%s\n", sa)
		}
		for _, d := range p.Destinations {
			fmt.Fprintf(out, "    destination %s\n", d)
		}
	}
	if len(imp.Protected) > 0 {
		fmt.Fprintf(out, "  never (protected targets): %s\n", strings.Join(imp.Protected, "; "))
	}
}

// combineResourceGroup is kubectl's describe.CombineResourceGroup
// (k8s.io/kubectl/pkg/describe), the Resources column of can-i --list:
// "resource.group/subresource". Written here because that package pulls
// kubectl's whole describer tree into deputy's binary.
func combineResourceGroup(resource, group []string) string {
	if len(resource) == 0 {
		return ""
	}
	parts := strings.SplitN(resource[0], "/", 2)
	combine := parts[0]
	if len(group) > 0 && group[0] != "" {
		combine = combine + "." + group[0]
	}
	if len(parts) == 2 {
		combine = combine + "/" + parts[1]
	}
	return combine
}
