package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/load"
	kauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/manifests"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/replay"
	"deputy.dev/deputy/serve"
)

type replayFlags struct {
	auditLogs   []string
	policy      []string
	baseline    []string
	configFile  string
	authzConfig string
	kubeconfig  string
	kubeContext string
	examples    int
	output      string
	failOn      string
	maxGroups   int
}

// Exit codes of deputy replay.
const (
	replayExitChanges = 1
	replayExitError   = 2
)

func newReplayCommand() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay --audit-log FILE... --policy NEW... [--baseline CURRENT...] [--config CFG] [--authorization-config FILE] [--kubeconfig FILE]",
		Short: "Replay kube-apiserver audit logs against a candidate policy and report what it would change",
		Long: `Read kube-apiserver audit logs (audit.k8s.io/v1 Event JSON lines, plain or
gzip), rebuild each request's authorization checks (impersonation checks as
kube-apiserver 1.37 makes them, then the request as the impersonated user),
decide them with a model of kube-apiserver's authorization chain around
deputy, and report which requests the candidate policy (--policy) newly
denies or newly allows, grouped by identity, verb and resource, with example
events. The baseline is what each event records (its
authorization.k8s.io/decision annotation) or, with --baseline, the same chain
under the current policy.

The chain is --authorization-config (default: what "deputy config
apiserver" writes with its defaults): system:masters first, Node for
system:nodes, each Webhook authorizer (deputy) when its matchConditions hold,
then RBAC: the cluster's RBAC objects with --kubeconfig, else kube-apiserver's
bootstrap grants. --config gives authorization.impersonation and
authorization.defaultDecision, as in deputy serve.

Events that cannot be rebuilt (unauthenticated, no decision recorded, a
denied impersonation whose target the log lacks, lines that are not events
or longer than 4 MiB) are counted by reason with an example, never dropped.

Exit codes: 0 done; 1 --fail-on matched (newly-denied, newly-allowed or any);
2 error, including a log in which not one request could be replayed.`,
		Example: `  deputy replay --audit-log /var/log/kubernetes/audit.log --policy policy-next/ --config deputy.yaml --kubeconfig ~/.kube/config
  deputy replay --audit-log audit.log.1.gz --audit-log audit.log --policy next/ --baseline current/ -o json
  deputy replay --audit-log audit.log --policy next/ --authorization-config /etc/kubernetes/deputy/authorization-config.yaml --fail-on newly-denied`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runReplay(cmd, &f); err != nil {
				if errors.As(err, new(exitError)) {
					return err
				}
				return exitError{code: replayExitError, err: err}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&f.auditLogs, "audit-log", nil, "kube-apiserver audit log (JSON lines, plain or gzip); repeatable, read in order")
	fs.StringArrayVar(&f.policy, "policy", nil, "candidate policy file or directory; repeatable; required")
	fs.StringArrayVar(&f.baseline, "baseline", nil, "current policy file or directory; repeatable; default: the decision each event records")
	fs.StringVar(&f.configFile, "config", "", "DeputyConfiguration: authorization.impersonation and authorization.defaultDecision")
	fs.StringVar(&f.authzConfig, "authorization-config", "", "the AuthorizationConfiguration kube-apiserver runs; default: deputy config apiserver's")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "read the cluster's RBAC objects and AppProjects (kube-apiserver's RBAC step and deputy's gate); default: kube-apiserver's bootstrap grants only")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	fs.IntVar(&f.examples, "examples", replay.DefaultExamples, "example events per group (the earliest)")
	fs.IntVar(&f.maxGroups, "max-groups", replay.DefaultMaxGroups, "groups of newly denied and of newly allowed beyond which changes are counted together")
	fs.StringVarP(&f.output, "output", "o", "table", "table or json")
	fs.StringVar(&f.failOn, "fail-on", "", "exit 1 when there are changes of this kind: newly-denied, newly-allowed or any")
	return cmd
}

// runReplay wires the flags into replay.Run and prints the report.
func runReplay(cmd *cobra.Command, f *replayFlags) error {
	switch {
	case len(f.auditLogs) == 0:
		return fmt.Errorf("--audit-log is required: name kube-apiserver's audit log (its --audit-log-path)")
	case len(f.policy) == 0:
		return fmt.Errorf("--policy is required: name the candidate policy's files or directories")
	case f.output != "table" && f.output != "json":
		return fmt.Errorf("--output %q is not supported: use table or json", f.output)
	case !slices.Contains([]string{"", "newly-denied", "newly-allowed", "any"}, f.failOn):
		return fmt.Errorf("--fail-on %q is not supported: use newly-denied, newly-allowed or any", f.failOn)
	case f.examples < 0 || f.maxGroups < 0:
		return fmt.Errorf("--examples and --max-groups must not be negative")
	}
	cfg, err := loadConfigFile(f.configFile)
	if err != nil {
		return err
	}
	authzCfg, authzWhat, err := loadAuthorizationConfig(f.authzConfig)
	if err != nil {
		return err
	}
	var cluster *policy.ClusterState
	rbacWhat := "kube-apiserver's bootstrap grants only (system:discovery, system:basic-user, system:public-info-viewer); give --kubeconfig for the cluster's RBAC"
	if f.kubeconfig != "" {
		if cluster, err = readCluster(cmd.Context(), config.Cluster{Kubeconfig: f.kubeconfig, Context: f.kubeContext}); err != nil {
			return err
		}
		rbacWhat = "the cluster's RBAC objects, read through " + f.kubeconfig
	}
	rbac, err := kubeRBAC(cluster)
	if err != nil {
		return err
	}
	chain := func(paths []string) (*replay.Chain, string, error) {
		snap, what, err := loadPolicyOnce("", paths)
		if err != nil {
			return nil, what, fmt.Errorf("policy from %s does not load:\n%w", what, err)
		}
		deputy, err := deputyAuthorizer(cfg.Authorization, snap, cluster)
		if err != nil {
			return nil, what, err
		}
		c, err := replay.NewChain(replay.ChainOptions{Config: authzCfg, Deputy: deputy, RBAC: rbac})
		if err != nil {
			return nil, what, fmt.Errorf("%s: %w", authzWhat, err)
		}
		return c, what, nil
	}
	newChain, newWhat, err := chain(f.policy)
	if err != nil {
		return err
	}
	opts := replay.Options{Files: f.auditLogs, New: newChain, Examples: f.examples, MaxGroups: f.maxGroups}
	baseWhat := ""
	if len(f.baseline) > 0 {
		if opts.Baseline, baseWhat, err = chain(f.baseline); err != nil {
			return err
		}
	}
	rep, err := replay.Run(cmd.Context(), opts)
	if err != nil {
		return err
	}
	rep.Policy = "policy " + newWhat + " through " + authzWhat
	if baseWhat != "" {
		rep.Baseline = "policy " + baseWhat
	}
	rep.RBAC = rbacWhat
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	if f.output == "json" {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteTable(out)
	}
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		return err
	}
	t := rep.Totals
	if t.Replayed+t.NotSentToDeputy+t.DecidedOutsideDeputy == 0 {
		// Not one request understood: a wrong --audit-log, or an audit
		// policy that records nothing at level Metadata. A CI gate must not
		// pass on that.
		return exitError{code: replayExitError, err: fmt.Errorf("no request in --audit-log %s could be replayed (%d lines read, %d unrebuildable, %d of other stages): is it kube-apiserver's audit log (--audit-log-path), recording requests at level Metadata or above?",
			strings.Join(f.auditLogs, ", "), t.EventsRead, t.Unrebuildable, t.OtherStages)}
	}
	if (f.failOn == "newly-denied" || f.failOn == "any") && t.NewlyDenied > 0 ||
		(f.failOn == "newly-allowed" || f.failOn == "any") && t.NewlyAllowed > 0 {
		return exitError{code: replayExitChanges}
	}
	return nil
}

// loadAuthorizationConfig loads --authorization-config as kube-apiserver
// does (k8s.io/apiserver's load package), or renders the default.
func loadAuthorizationConfig(path string) (*apiserver.AuthorizationConfiguration, string, error) {
	if path == "" {
		data, err := manifests.DefaultAuthorizationConfig("/etc/kubernetes/deputy")
		if err != nil {
			return nil, "", err
		}
		c, err := load.LoadFromData(data)
		return c, "the AuthorizationConfiguration of deputy config apiserver's defaults", err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, "", fmt.Errorf("--authorization-config: %w", err)
	}
	c, err := load.LoadFromFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("--authorization-config %s is not an AuthorizationConfiguration kube-apiserver loads: %w", path, err)
	}
	return c, "the AuthorizationConfiguration " + path, nil
}

// deputyAuthorizer is what deputy serve answers at /authorize for a policy
// (serve's newAuthorizer, without its reloading): the impersonation gate,
// then the policy's RBAC, with authorization.defaultDecision.
func deputyAuthorizer(a config.Authorization, snap *policy.Snapshot, cluster *policy.ClusterState) (kauthorizer.Authorizer, error) {
	decision, err := deputyauthz.ParseDefaultDecision(a.DefaultDecision)
	if err != nil {
		return nil, err
	}
	gateOpts, err := serve.GateOptions(a.Impersonation)
	if err != nil {
		return nil, err
	}
	var clusterState deputyauthz.ClusterStateFunc
	if cluster != nil {
		clusterState = func() *policy.ClusterState { return cluster }
	}
	current := func() *policy.Snapshot { return snap }
	return deputyauthz.Compose(deputyauthz.Options{Default: decision}, deputyauthz.NewGate(gateOpts, current, clusterState), deputyauthz.NewRBAC(current))
}

// kubeRBAC is kube-apiserver's RBAC authorizer over the cluster's RBAC
// objects, or, without a cluster, over kube-apiserver's bootstrap grants.
func kubeRBAC(cluster *policy.ClusterState) (kauthorizer.Authorizer, error) {
	snap := &policy.Snapshot{}
	if cluster != nil {
		snap.RBAC = cluster.RBAC
	} else {
		var objs policy.Objects
		for _, g := range deputyauthz.BootstrapGrants() {
			objs.RBAC.ClusterRoles = append(objs.RBAC.ClusterRoles, &g.ClusterRole)
			objs.RBAC.ClusterRoleBindings = append(objs.RBAC.ClusterRoleBindings, &g.ClusterRoleBinding)
		}
		var err error
		if snap, err = policy.Build(&objs, false); err != nil {
			return nil, fmt.Errorf("failed to index kube-apiserver's bootstrap grants: %w", err)
		}
	}
	return deputyauthz.NewRBAC(func() *policy.Snapshot { return snap }), nil
}
