// Package e2e runs deputy in front of a real kube-apiserver v1.37.2 and etcd
// (built from Go modules by `make test-binaries`): kube-apiserver's
// authorization, token authentication and AppProject admission decisions come
// from a deputy process started as an operator would start it.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"deputy.dev/deputy/test/framework"
)

// aliceToken is known only to deputy's token file (stored there as its SHA-256).
const aliceToken = "e2e-alice-token-4c1d9b"

var (
	deputy *framework.Deputy
	cp     *framework.ControlPlane
	work   string
	// extraPolicy is a second, watched policy directory the tests write into.
	extraPolicy string
	// auditLog is kube-apiserver's audit log (JSON lines, every write).
	auditLog string
	// repoRoot holds the tests' local Git repositories: the directory the
	// engines and replicas under test allow local repositories from
	// (sync.localRepositories), apart from every cache directory.
	repoRoot string
)

// deputyConfig is the e2e DeputyConfiguration: Argo CD's application
// controller is a sync identity, reading argoproj.io AppProjects in argocd,
// and so is deputy's own (deputy-system/deputy, deputy.dev AppProjects);
// constrained impersonation is required so that the gate's per-action checks
// are what the tests observe.
func deputyConfig(strict bool) string {
	return fmt.Sprintf(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
authorization:
  impersonation:
    impersonators:
    - serviceAccount: argocd/argocd-application-controller
      projects: {apiGroups: [argoproj.io], namespaces: [argocd]}
      applicationNamespaces: [argocd]
    # deputy's own sync identity: the attack suite's replicas keep their
    # AppProjects in deputy-system, the controller tests' in e2e-main-deputy.
    # (Left out, the gate would read only sync.projectNamespaces below.)
    - serviceAccount: deputy-system/deputy
      projects: {namespaces: [deputy-system, e2e-main-deputy]}
    strict: %t
    requireConstrained: true
api:
  # kube-apiserver's aggregation layer (front proxy) presents deputy's
  # kube-apiserver client certificate (aggregation_test.go).
  requestHeader:
    clientCAFile: %s
    allowedNames: [kube-apiserver]
sync:
  # The Application controllers under test are the pair that
  # controller_test.go starts; this deputy answers kube-apiserver's webhooks
  # and leaves their Applications alone.
  applicationNamespaces: [e2e-main-deputy]
  # The AppProjects of those Applications live next to them: the tests'
  # operator makes e2e-main-deputy a project namespace.
  projectNamespaces: [e2e-main-deputy]
  leaderElection: {leaseNamespace: default}
`, strict, filepath.Join(deputy.CertDir, "ca.crt"))
}

func fileModeArgs() []string {
	return []string{"--policy", filepath.Join("testdata", "policy"), "--policy", extraPolicy}
}

func clusterModeArgs(cfgFile string) []string {
	return append(fileModeArgs(), "--config", cfgFile, "--kubeconfig", cp.AdminKubeconfig)
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if framework.ListingOnly() {
		return m.Run() // go test -list: no build, no control plane
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	work, err = os.MkdirTemp("", "deputy-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(work)
	// kubectl's discovery and HTTP caches stay inside work.
	if err := framework.UseKubectlCacheDir(filepath.Join(work, "kube-cache")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Join(work, "repos")
	if err := os.Mkdir(repoRoot, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	bin, err := framework.DeputyBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	certDir := filepath.Join(work, "certs")
	if _, err := framework.CLI(bin, "certs", "init", "--dir", certDir, "--hosts", "127.0.0.1,localhost,"+aggregatedServiceHost); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// extraPolicy is a watched policy directory the tests write into.
	extraPolicy = filepath.Join(work, "policy-extra")
	if err := os.Mkdir(extraPolicy, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// deputy starts in file mode so that kube-apiserver (whose own health
	// probes go through deputy) can start; it is restarted in cluster mode
	// once the control plane is up.
	deputy, err = framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: certDir, Args: fileModeArgs()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := deputy.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping deputy:", err)
		}
	}()
	// Every write is audited (Metadata level), so that tests can see who
	// made it and whom it impersonated; every request of the replay test's
	// users too. TestDriftAtScale (DEPUTY_SCALE=1
	// only) counts every request of the replicas' identity, reads too.
	// TestReplayAuditLog replays every request of its users.
	everyRequestOf := []string{replayAnn, replayBen}
	if scaleEnabled() {
		everyRequestOf = append(everyRequestOf, deputyUser)
	}
	auditPolicy, err := framework.WriteAuditPolicy(work, everyRequestOf...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	auditLog = filepath.Join(work, "audit.log")
	cp, err = framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		DeputyBin: bin, DeputyURL: deputy.URL, CertDir: certDir, WorkDir: work,
		ConfigArgs: []string{"--authorized-ttl", "1s", "--unauthorized-ttl", "1s"},
		APIServerArgs: map[string]string{"audit-policy-file": auditPolicy, "audit-log-path": auditLog,
			// The aggregation layer proxies to deputy with deputy's
			// kube-apiserver client certificate as its front-proxy identity.
			"requestheader-client-ca-file":       filepath.Join(certDir, "ca.crt"),
			"requestheader-allowed-names":        "kube-apiserver",
			"requestheader-username-headers":     "X-Remote-User",
			"requestheader-group-headers":        "X-Remote-Group",
			"requestheader-extra-headers-prefix": "X-Remote-Extra-",
			"proxy-client-cert-file":             filepath.Join(certDir, "kube-apiserver-client.crt"),
			"proxy-client-key-file":              filepath.Join(certDir, "kube-apiserver-client.key"),
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "deputy log:\n"+deputy.Logs())
		return 1
	}
	defer cp.Stop()

	cfgFile := filepath.Join(work, "deputy.yaml")
	if err := os.WriteFile(cfgFile, []byte(deputyConfig(true)), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if deputy, err = deputy.Restart(clusterModeArgs(cfgFile)...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	readyCtx, readyCancel := context.WithTimeout(ctx, time.Minute)
	defer readyCancel()
	if err := deputy.WaitReady(readyCtx); err != nil {
		fmt.Fprintln(os.Stderr, err, "\n"+deputy.Logs())
		return 1
	}

	code := m.Run()
	// The attack suite's namespaces, projects and Git servers (shared by
	// its tests) outlive each test; remove them now.
	attackTeardown()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "deputy log:\n"+deputy.Logs())
	}
	return code
}
