package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/manifests"
)

// APIAudience is the API audience of the e2e kube-apiserver, the one a real
// cluster uses by default (its service-account issuer); deputy's default
// authentication.apiAudiences matches it.
const APIAudience = "https://kubernetes.default.svc.cluster.local"

// ControlPlane is a kube-apiserver + etcd started by envtest with deputy as
// its authorization webhook (before RBAC), its token-authentication webhook,
// and the validating webhook for AppProjects.
type ControlPlane struct {
	Env *envtest.Environment
	// Admin is a client config in group system:masters (never sent to
	// webhooks by kube-apiserver).
	Admin *rest.Config
	// AdminKubeconfig is a kubeconfig file for Admin, for kubectl.
	AdminKubeconfig string
	// ConfigDir holds what `deputy config apiserver` wrote.
	ConfigDir string
}

// ControlPlaneOptions configure StartControlPlane.
type ControlPlaneOptions struct {
	DeputyBin string
	DeputyURL string
	CertDir   string
	WorkDir   string
	// ConfigArgs are extra `deputy config apiserver` flags (TTLs, failure policy).
	ConfigArgs []string
	// APIServerArgs are extra kube-apiserver flags, set after the ones `deputy
	// config apiserver` prints; an empty value removes the flag.
	APIServerArgs map[string]string
	// LegacyFlags generates with `deputy config apiserver --legacy-flags`:
	// kube-apiserver then runs with --authorization-mode and
	// --authorization-webhook-* instead of --authorization-config.
	LegacyFlags bool
}

// StartControlPlane generates the kube-apiserver configuration with `deputy
// config apiserver`, starts kube-apiserver with the flags that command tells
// the operator to remove and add (--authorization-config, or with
// LegacyFlags --authorization-mode and --authorization-webhook-*, and
// --authentication-token-webhook-*), installs deputy's CRDs and applies the
// generated ValidatingWebhookConfiguration.
func StartControlPlane(ctx context.Context, o ControlPlaneOptions) (*ControlPlane, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{ConfigDir: filepath.Join(o.WorkDir, "apiserver")}
	args := append([]string{"config", "apiserver", "--url", o.DeputyURL, "--certs", o.CertDir, "--out", cp.ConfigDir}, o.ConfigArgs...)
	if o.LegacyFlags {
		args = append(args, "--legacy-flags")
	}
	out, err := CLI(o.DeputyBin, args...)
	if err != nil {
		return nil, err
	}
	remove, add := InstructedFlags(out)
	if len(add) == 0 {
		return nil, fmt.Errorf("deputy %v printed no kube-apiserver flags to add:\n%s", args, out)
	}
	cp.Env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			filepath.Join(RepoRoot(), "manifests", "crds"),
			filepath.Join(RepoRoot(), "manifests", "testing"),
		},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	api := cp.Env.ControlPlane.GetAPIServer()
	a := api.Configure()
	for _, name := range remove {
		a.Disable(name)
	}
	for _, f := range add {
		a.Set(f[0], f[1])
	}
	a.Set("authentication-token-webhook-cache-ttl", "1s")
	a.Set("api-audiences", APIAudience)
	for k, v := range o.APIServerArgs {
		if v == "" {
			a.Disable(k)
			continue
		}
		a.Set(k, v)
	}
	if cp.Env.Config, err = cp.Env.Start(); err != nil {
		return nil, fmt.Errorf("failed to start kube-apiserver and etcd: %w", err)
	}
	admin, err := cp.Env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		cp.Stop()
		return nil, err
	}
	cp.Admin = admin.Config()
	kc, err := admin.KubeConfig()
	if err != nil {
		cp.Stop()
		return nil, err
	}
	cp.AdminKubeconfig = filepath.Join(o.WorkDir, "admin.kubeconfig")
	if err := os.WriteFile(cp.AdminKubeconfig, kc, 0o600); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.applyValidatingWebhook(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// InstructedFlags returns the kube-apiserver flags the instructions of
// `deputy config apiserver` (output) tell the operator to remove ("remove
// --name=...") and to add ("add --name=value"), in order.
func InstructedFlags(output string) (remove []string, add [][2]string) {
	for _, line := range strings.Split(output, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[1], "--") {
			continue
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(fields[1], "--"), "=")
		switch fields[0] {
		case "remove":
			remove = append(remove, name)
		case "add":
			add = append(add, [2]string{name, value})
		}
	}
	return remove, add
}

func (cp *ControlPlane) applyValidatingWebhook(ctx context.Context) error {
	data, err := os.ReadFile(filepath.Join(cp.ConfigDir, manifests.ValidatingWebhookFile))
	if err != nil {
		return err
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &vwc); err != nil {
		return fmt.Errorf("generated %s: %w", manifests.ValidatingWebhookFile, err)
	}
	cs, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &vwc, metav1CreateOptions)
	return err
}

// Stop stops kube-apiserver and etcd.
func (cp *ControlPlane) Stop() {
	if cp.Env != nil {
		_ = cp.Env.Stop()
	}
}

// TokenConfig is a client config authenticating with a bearer token.
func (cp *ControlPlane) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.Admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.Admin.CAData},
		BearerToken:     token,
		QPS:             100,
		Burst:           200,
	}
}

// Kubectl runs kubectl with the admin kubeconfig (plus args) and returns
// stdout and stderr.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, string, error) {
	return Kubectl(ctx, stdin, append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
}

// Kubectl runs kubectl with args (and stdin, if not nil) and returns stdout
// and stderr. Its caches go to the directory UseKubectlCacheDir set, else to
// a temporary one removed afterwards.
func Kubectl(ctx context.Context, stdin []byte, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	env, done, err := kubectlEnv() // never ~/.kube/cache
	if err != nil {
		return "", "", err
	}
	defer done()
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// Itoa is strconv.Itoa, for test table names.
func Itoa(i int) string { return strconv.Itoa(i) }
