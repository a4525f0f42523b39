package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

func newValidateCommand() *cobra.Command {
	var (
		configFile      string
		paths           []string
		defaultDecision string
	)
	cmd := &cobra.Command{
		Use:   "validate [--policy PATH]... [--config FILE]",
		Short: "Check policy files offline, as deputy serve would load them",
		Long: `Load the policy files the way deputy serve does and report every problem
with its file and document, plus AppProject lint warnings. With
authorization.defaultDecision Deny (--config, or --default-decision), also
warn when the policy lacks one of kube-apiserver's bootstrap grants
(system:discovery, system:basic-user, system:public-info-viewer; see
examples/bootstrap.yaml) that ordinary clients need. Exits 0 when the policy
would load, 1 otherwise. Use it in CI before shipping a policy change.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("default-decision") {
				if _, err := deputyauthz.ParseDefaultDecision(defaultDecision); err != nil {
					return fmt.Errorf("--default-decision: %w", err)
				}
			}
			snap, what, err := loadPolicyOnce(configFile, paths)
			out := cmd.OutOrStdout()
			if err != nil {
				if !strings.HasPrefix(what, "the configuration ") {
					what = "policy from " + what
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s does not load:\n%v\n", what, err)
				return exitError{code: 1}
			}
			roles, clusterRoles, rbs, crbs := snap.RBAC.Counts()
			fmt.Fprintf(out, "ok: %d files, %d Roles, %d ClusterRoles, %d RoleBindings, %d ClusterRoleBindings, %d AppProjects, %d Applications, %d tokens\n",
				len(snap.Files), roles, clusterRoles, rbs, crbs, len(snap.Projects), len(snap.Applications), snap.Tokens.Len())
			for _, b := range snap.RBAC.UnresolvedBindings() {
				kind, name := "ClusterRoleBinding", b.Name
				if b.Namespace != "" {
					kind, name = "RoleBinding", b.Namespace+"/"+b.Name
				}
				fmt.Fprintf(out, "warning: %s %s %s: %v (it grants nothing until the role exists)\n", b.Source, kind, name, b.RoleErr)
			}
			for _, p := range snap.Projects {
				_, warnings := policy.ValidateAppProject(p.Object)
				for _, w := range warnings {
					fmt.Fprintf(out, "warning: %s AppProject %s/%s: %s\n", p.Source, p.Object.Namespace, p.Object.Name, w)
				}
			}
			cfg, err := loadConfigFile(configFile)
			if err != nil {
				return err
			}
			for _, a := range snap.Applications {
				if _, err := policy.ResolveAppProject(a.Object, cfg.Sync.ProjectNamespaces, snap.DeputyAppProject); err != nil {
					fmt.Fprintf(out, "warning: %s Application %s/%s: %s; its syncs fail until that is fixed\n",
						a.Source, a.Object.Namespace, a.Object.Name, strings.TrimPrefix(err.Error(), policy.ErrProjectNotUsable.Error()+": "))
				}
			}
			if cmd.Flags().Changed("default-decision") {
				cfg.Authorization.DefaultDecision = defaultDecision
			}
			if decision, _ := deputyauthz.ParseDefaultDecision(cfg.Authorization.DefaultDecision); decision == deputyauthz.DefaultDeny {
				warnMissingBootstrapGrants(out, snap)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "DeputyConfiguration file whose policy.paths to check")
	cmd.Flags().StringArrayVar(&paths, "policy", nil, "policy file or directory; repeatable; default: the embedded examples")
	cmd.Flags().StringVar(&defaultDecision, "default-decision", "", "the authorization.defaultDecision deputy serve will run with (default: --config's, else NoOpinion); Deny also checks for kube-apiserver's bootstrap grants")
	return cmd
}

// warnMissingBootstrapGrants warns, one line per grant, when a policy served
// with authorization.defaultDecision Deny lacks one of kube-apiserver's
// bootstrap grants that ordinary clients need: deputy's denial is final, so
// kube-apiserver's own RBAC never grants them.
func warnMissingBootstrapGrants(out io.Writer, snap *policy.Snapshot) {
	for _, m := range deputyauthz.MissingBootstrapGrants(snap) {
		name := m.Grant.ClusterRole.Name
		fmt.Fprintf(out, "warning: authorization.defaultDecision is Deny and the policy lacks kube-apiserver's bootstrap grant %s (%s): deputy denies %s; "+
			"add the ClusterRole and ClusterRoleBinding %q of %s to the policy, or run with defaultDecision NoOpinion\n",
			name, m.Grant.Purpose, strings.Join(m.Denied, "; "), name, deputyauthz.BootstrapFile)
	}
}
