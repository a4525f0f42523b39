package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/scheme"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/clustersource"
	"deputy.dev/deputy/serve"
)

type canIFlags struct {
	kubeconfig  string
	kubeContext string
	namespace   string
	as          string
	asGroups    []string
	subresource string
	configFile  string
	policy      []string
	list        bool
	output      string
}

func newCanICommand() *cobra.Command {
	var f canIFlags
	cmd := &cobra.Command{
		Use:   "can-i (VERB (RESOURCE[.GROUP][/NAME] | NONRESOURCEURL) | --list) [-n NS] --as USER [--as-group G]... [--policy PATH]... [--config FILE]",
		Short: "Evaluate a request offline against deputy's policy, like kubectl auth can-i",
		Long: `Evaluate one request against the policy, offline, and print yes or no with
the binding and rule, or the AppProject entry, that decided. Exit code 0 means
yes, 1 means no. Impersonation (verb impersonate on serviceaccounts, users,
groups) goes through deputy's impersonation gate first, configured by
--config's authorization.impersonation (defaults otherwise), and is answered
for both checks kube-apiserver makes: constrained impersonation
(impersonate:serviceaccount or impersonate:user-info, kube-apiserver 1.36+),
then the legacy fallback; either allowing is a yes.

RESOURCE is a plural resource name (pods), optionally with its API group
(deployments.apps) and a name (serviceaccounts/deployer). Built-in resources
without a group get theirs from Kubernetes' own types (deployments -> apps).
An argument starting with / is a non-resource URL (/healthz).

As kube-apiserver does for every authenticated request, the group
system:authenticated is added to --as-group (and system:serviceaccounts,
system:serviceaccounts:NS for a ServiceAccount user).

With --list (and no VERB or RESOURCE), every rule that applies to the user in
-n's namespace (cluster-wide rules only without -n) is printed as kubectl
auth can-i --list prints it, with the binding each comes from, followed by
what deputy's impersonation gate lets the user impersonate.`,
		Example: `  deputy can-i list pods -n team-a --as alice --policy examples/
  deputy can-i get /healthz --as bob
  deputy can-i --list -n team-a --as alice --policy examples/
  deputy can-i create deployments.apps -n guestbook --as system:serviceaccount:guestbook:guestbook-deployer
  deputy can-i impersonate serviceaccounts/deployer -n team-a --as alice --policy policy/
  deputy can-i impersonate serviceaccounts/guestbook-deployer -n guestbook --as system:serviceaccount:argocd:argocd-application-controller --config deputy.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if f.list && len(args) > 0 {
				return fmt.Errorf("can-i --list takes no VERB or RESOURCE (got %q): it lists every rule that applies to --as in -n", args)
			}
			if f.list {
				return nil
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.as == "" {
				return fmt.Errorf("--as is required: name the user to evaluate, e.g. --as alice")
			}
			if f.list {
				return runCanIList(cmd, &f)
			}
			if f.output != "" {
				return fmt.Errorf("-o %s: only can-i --list has an output format (json)", f.output)
			}
			attrs, d, err := requestAndDecider(cmd, args[0], args[1], &f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			shapes := impersonationShapes(attrs)
			if len(shapes) == 0 {
				allowed, lines := d.decide(cmd.Context(), attrs)
				fmt.Fprintf(out, "%s\n%s", yesNo(allowed), lines)
				if !allowed {
					return exitError{code: 1}
				}
				return nil
			}
			// kube-apiserver tries the constrained mode first and falls
			// back to legacy impersonation: either allowing is a yes.
			var body strings.Builder
			allowed := false
			for _, sh := range shapes {
				ok, lines := d.decide(cmd.Context(), sh.attrs)
				allowed = allowed || ok
				fmt.Fprintf(&body, "  %s (%s): %s\n%s", sh.name, sh.attrs.Verb, yesNo(ok), indent(lines))
			}
			fmt.Fprintf(out, "%s\n%s", yesNo(allowed), body.String())
			if !allowed {
				return exitError{code: 1}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.namespace, "namespace", "n", "", "namespace of the request (empty: cluster-scoped or all namespaces)")
	fs.StringVar(&f.as, "as", "", "user to evaluate (system:serviceaccount:NS:NAME for a ServiceAccount)")
	fs.StringArrayVar(&f.asGroups, "as-group", nil, "group of the user; repeatable")
	fs.StringVar(&f.subresource, "subresource", "", "subresource, e.g. log or scale")
	fs.StringVar(&f.configFile, "config", "", "DeputyConfiguration file (its policy.paths are used when --policy is not given)")
	fs.StringArrayVar(&f.policy, "policy", nil, "policy file or directory; repeatable; default: the embedded examples")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "also read the cluster's AppProjects and RBAC objects, as deputy serve does in cluster mode")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	fs.BoolVar(&f.list, "list", false, "list every rule that applies to --as in -n (as kubectl auth can-i --list) and what the impersonation gate lets it impersonate")
	fs.StringVarP(&f.output, "output", "o", "", "with --list: json for machine-readable output")
	return cmd
}

// canIDecider answers one request as deputy serve would: the impersonation
// gate first, then deputy's RBAC, and (with --kubeconfig) what the cluster's
// RBAC would answer after deputy's no opinion.
type canIDecider struct {
	gate    *deputyauthz.Gate
	snap    *policy.Snapshot
	cluster *policy.ClusterState
	what    string
	// deny: authorization.defaultDecision is Deny.
	deny bool
}

// requestAndDecider is what can-i and who-can start with: the request of
// VERB TARGET (canIAttributes) and the decider (loadDecider); the note on
// how the target was read goes to stderr.
//
// Errors: those of canIAttributes and loadDecider.
func requestAndDecider(cmd *cobra.Command, verb, target string, f *canIFlags) (*authorizer.AttributesRecord, canIDecider, error) {
	attrs, note, err := canIAttributes(verb, target, f)
	if err != nil {
		return nil, canIDecider{}, err
	}
	d, err := loadDecider(cmd.Context(), f)
	if err != nil {
		return nil, canIDecider{}, err
	}
	if note != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", note)
	}
	return attrs, d, nil
}

// loadDecider loads what can-i and who-can decide with: the configuration
// (--config), the policy (--policy, else the configuration's paths, else the
// embedded examples), the impersonation gate configured as deputy serve
// configures it, and with --kubeconfig the cluster's AppProjects and RBAC.
//
// Errors: an invalid configuration, a policy that does not load (every
// problem named), an unreachable cluster.
func loadDecider(ctx context.Context, f *canIFlags) (canIDecider, error) {
	cfg, err := loadConfigFile(f.configFile)
	if err != nil {
		return canIDecider{}, err
	}
	snap, what, err := loadPolicyOnce(f.configFile, f.policy)
	if err != nil {
		if !strings.HasPrefix(what, "the configuration ") {
			what = "policy from " + what
		}
		return canIDecider{}, fmt.Errorf("%s does not load:\n%w", what, err)
	}
	// The impersonation gate answers first, as in deputy serve.
	gateOpts, err := serve.GateOptions(cfg.Authorization.Impersonation)
	if err != nil {
		return canIDecider{}, err
	}
	var clusterState deputyauthz.ClusterStateFunc
	var cluster *policy.ClusterState
	if f.kubeconfig != "" {
		if cluster, err = readCluster(ctx, config.Cluster{Kubeconfig: f.kubeconfig, Context: f.kubeContext}); err != nil {
			return canIDecider{}, err
		}
		clusterState = func() *policy.ClusterState { return cluster }
	}
	gate := deputyauthz.NewGate(gateOpts, func() *policy.Snapshot { return snap }, clusterState)
	return canIDecider{gate: gate, snap: snap, cluster: cluster, what: what,
		deny: cfg.Authorization.DefaultDecision == string(deputyauthz.DefaultDeny)}, nil
}

// decide returns whether attrs is allowed and the explanation lines
// (indented two spaces, newline-terminated).
func (d canIDecider) decide(ctx context.Context, attrs *authorizer.AttributesRecord) (bool, string) {
	var b strings.Builder
	switch dec, reason, gerr := d.gate.Authorize(ctx, attrs); dec {
	case authorizer.DecisionAllow:
		fmt.Fprintf(&b, "  %s\n", reason)
		return true, b.String()
	case authorizer.DecisionDeny:
		if gerr != nil {
			reason += " (" + gerr.Error() + ")"
		}
		fmt.Fprintf(&b, "  %s\n", reason)
		return false, b.String()
	}
	ex := deputyauthz.Explain(d.snap, attrs)
	for _, e := range ex.Errors {
		fmt.Fprintf(&b, "  warning: %v\n", e)
	}
	if ex.Binding != nil {
		fmt.Fprintf(&b, "  %s\n  rule: %s\n", ex.Reason(), deputyauthz.DescribeRule(ex.Rule))
		if ex.Binding.Source != "" {
			fmt.Fprintf(&b, "  binding defined in %s\n", ex.Binding.Source)
		}
		return true, b.String()
	}
	if d.cluster != nil && !d.deny {
		// Not deputy's own decision, but what the cluster's RBAC
		// (kube-apiserver's next authorizer) would answer. With
		// defaultDecision Deny deputy denies first: kube-apiserver never
		// asks the next authorizer.
		if cex := deputyauthz.Explain(&policy.Snapshot{RBAC: d.cluster.RBAC}, attrs); cex.Binding != nil {
			fmt.Fprintf(&b, "  deputy has no opinion; the cluster's RBAC allows: %s\n  rule: %s\n", cex.Reason(), deputyauthz.DescribeRule(cex.Rule))
			return true, b.String()
		}
	}
	then := "deputy answers no opinion; kube-apiserver's next authorizer decides"
	if d.deny {
		then = "deputy denies: authorization.defaultDecision is Deny"
	}
	fmt.Fprintf(&b, "  no binding in %s allows %s (%s)\n", d.what, describeAttributes(attrs), then)
	// The explanation deputy serve gives in a default denial.
	if why := deputyauthz.ExplainDenial(d.snap, attrs); why != "" {
		fmt.Fprintf(&b, "  %s\n", why)
	}
	return false, b.String()
}

// impersonationShape is one way kube-apiserver checks an impersonation.
type impersonationShape struct {
	name  string
	attrs *authorizer.AttributesRecord
}

// impersonationShapes returns, for `impersonate` on serviceaccounts, users
// or groups (kubectl auth can-i's spelling, the legacy check), the checks
// kube-apiserver 1.36+ makes in order: the constrained mode first
// (impersonate:serviceaccount, or impersonate:user-info, in group
// authentication.k8s.io), then the legacy one. Anything else: none.
func impersonationShapes(a *authorizer.AttributesRecord) []impersonationShape {
	if !a.ResourceRequest || a.Verb != "impersonate" || a.APIGroup != "" || a.Subresource != "" {
		return nil
	}
	mode := ""
	switch a.Resource {
	case "serviceaccounts":
		mode = "serviceaccount"
	case "users", "groups":
		mode = "user-info"
	default:
		return nil
	}
	constrained := *a
	constrained.Verb = "impersonate:" + mode
	constrained.APIGroup = "authentication.k8s.io"
	constrained.APIVersion = "v1"
	return []impersonationShape{
		{name: "constrained impersonation, kube-apiserver 1.36+", attrs: &constrained},
		{name: "legacy impersonation, the fallback", attrs: a},
	}
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// indent adds two spaces to every line of lines.
func indent(lines string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(lines, "\n") {
		if l != "" {
			b.WriteString("  " + l)
		}
	}
	return b.String()
}

// canIAttributes builds the request attributes as kubectl auth can-i plus
// kube-apiserver's authentication would: groups augmented like the
// authenticated-group adder and the ServiceAccount authenticator do.
func canIAttributes(verb, target string, f *canIFlags) (*authorizer.AttributesRecord, string, error) {
	u := &user.DefaultInfo{Name: f.as, Groups: deputyauthz.AuthenticatedGroups(f.as, f.asGroups)}
	if strings.HasPrefix(target, "/") {
		return &authorizer.AttributesRecord{User: u, Verb: verb, Path: target}, "", nil
	}
	resource, name, _ := strings.Cut(target, "/")
	group := ""
	note := ""
	if plural := pluralOfKind(resource); plural != "" {
		note = fmt.Sprintf("%q read as the resource %q", resource, plural)
		resource = plural
	}
	if r, g, ok := strings.Cut(resource, "."); ok {
		resource, group = r, g
	} else if strings.HasPrefix(verb, deputyauthz.VerbPrefixImpersonateMode) {
		// Every constrained impersonation check is in authentication.k8s.io
		// (k8s.io/apiserver filters/impersonation), whatever the resource.
		group = deputyauthz.AuthenticationGroup
		note = fmt.Sprintf("verb %q is checked on API group %q; write %s.%s to be explicit", verb, group, resource, group)
	} else if g, ambiguous := builtinGroup(resource); g != "" || ambiguous != "" {
		group = g
		if group != "" {
			note = fmt.Sprintf("%q is a built-in resource of API group %q; write %s.%s to be explicit", resource, group, resource, group)
		}
		if ambiguous != "" {
			note = fmt.Sprintf("%q exists in API groups %s; assumed %q (write RESOURCE.GROUP to choose)", resource, ambiguous, group)
		}
	}
	if resource == "" {
		return nil, "", fmt.Errorf("resource %q is empty: write RESOURCE[.GROUP][/NAME], e.g. pods or deployments.apps/web", target)
	}
	return &authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: f.namespace, APIGroup: group, APIVersion: "*",
		Resource: resource, Subresource: f.subresource, Name: name, ResourceRequest: true,
	}, note, nil
}

// pluralOfKind maps a built-in kind written in the singular ("pod",
// "Deployment") to its plural resource, as kubectl does through discovery;
// "" when the argument is not such a kind.
func pluralOfKind(arg string) string {
	if strings.Contains(arg, ".") {
		return ""
	}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if strings.EqualFold(gvk.Kind, arg) {
			plural, _ := meta.UnsafeGuessKindToResource(gvk)
			if plural.Resource != arg {
				return plural.Resource
			}
		}
	}
	return ""
}

// builtinGroup finds the API group of a built-in plural resource from
// client-go's scheme (Kubernetes' own types), preferring the core group, then
// the group that is not deprecated-looking (lexically first otherwise).
func builtinGroup(resource string) (group string, ambiguous string) {
	groups := map[string]bool{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") || gvk.Kind == "WatchEvent" || gvk.Kind == "Status" {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		if plural.Resource == resource {
			groups[gvk.Group] = true
		}
	}
	if len(groups) == 0 {
		return "", ""
	}
	if len(groups) > 1 {
		// extensions/v1beta1 still has Go types for kinds kube-apiserver
		// stopped serving there in 1.16.
		delete(groups, "extensions")
	}
	list := make([]string, 0, len(groups))
	for g := range groups {
		list = append(list, g)
	}
	sort.Strings(list)
	if len(list) == 1 {
		return list[0], ""
	}
	return list[0], fmt.Sprintf("%q", list)
}

func describeAttributes(a *authorizer.AttributesRecord) string {
	if !a.ResourceRequest {
		return fmt.Sprintf("%s %s for user %q", a.Verb, a.Path, a.User.GetName())
	}
	r := a.Resource
	if a.APIGroup != "" {
		r += "." + a.APIGroup
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	s := fmt.Sprintf("%s %s", a.Verb, r)
	if a.Name != "" {
		s += fmt.Sprintf(" named %q", a.Name)
	}
	if a.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", a.Namespace)
	}
	return s + fmt.Sprintf(" for user %q", a.User.GetName())
}

// clusterSyncTimeout bounds how long can-i waits for the cluster's first list.
const clusterSyncTimeout = time.Minute

// readCluster lists the cluster's AppProjects and RBAC objects once through
// the same informers deputy serve uses, and returns the synced state.
//
// Errors: the kubeconfig cannot be loaded, or the lists did not complete
// within clusterSyncTimeout (with the last list error, e.g. forbidden).
func readCluster(ctx context.Context, c config.Cluster) (*policy.ClusterState, error) {
	restCfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	src, err := clustersource.New(restCfg, clustersource.Options{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterSyncTimeout)
	defer cancel()
	go func() { _ = src.Run(ctx) }()
	for {
		if st := src.Current(); st != nil && st.Synced {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading AppProjects and RBAC objects from the cluster did not complete within %s: %v", clusterSyncTimeout, src.Status().LastError)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
