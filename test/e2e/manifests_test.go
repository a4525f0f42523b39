package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeadmv1beta4 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/manifests"
	"deputy.dev/deputy/test/framework"
)

// deputyNamespace is the namespace manifests/base installs deputy in.
const deputyNamespace = "deputy-system"

// TestManifests checks the install YAML under manifests/: the kustomize base
// against the e2e kube-apiserver (deputy's admission webhooks included), the
// cert-manager overlay rendered only (cert-manager's CRDs are not installed
// here), the kube-apiserver configuration for kubeadm and kind, and deputy
// itself running with the base's configuration as the base's ServiceAccount.
func TestManifests(t *testing.T) {
	base := kustomize(t, repoPath("manifests", "base"))

	t.Run("deputy's ClusterRole and Role grant no impersonation and no wildcard", func(t *testing.T) {
		var roles []string
		for _, o := range base {
			var rules []rbacv1.PolicyRule
			switch o.GetKind() {
			case "ClusterRole":
				var r rbacv1.ClusterRole
				fromUnstructured(t, o, &r)
				rules = r.Rules
			case "Role":
				var r rbacv1.Role
				fromUnstructured(t, o, &r)
				rules = r.Rules
			default:
				continue
			}
			roles = append(roles, o.GetKind()+" "+o.GetName())
			for _, r := range rules {
				for _, v := range r.Verbs {
					if strings.HasPrefix(v, "impersonate") || v == rbacv1.VerbAll {
						t.Errorf("%s %s: rule %v grants verb %q", o.GetKind(), o.GetName(), r, v)
					}
				}
				if slices.Contains(r.Resources, rbacv1.ResourceAll) || slices.Contains(r.APIGroups, rbacv1.APIGroupAll) {
					t.Errorf("%s %s: rule %v has a wildcard resource or API group", o.GetKind(), o.GetName(), r)
				}
			}
		}
		if diff := cmp.Diff([]string{"ClusterRole deputy", "Role deputy"}, sortedCopy(roles)); diff != "" {
			t.Errorf("roles in the base (-want +got):\n%s", diff)
		}
	})

	t.Run("kubectl apply -k manifests/base --dry-run=server succeeds", func(t *testing.T) {
		// The CRDs are installed already (StartControlPlane installs
		// manifests/crds), so their dry run is an update, and the base holds
		// no custom resources that would need them first. Namespaced objects
		// cannot be dry-run into a namespace that does not exist
		// (NamespaceLifecycle admission), so the base's Namespace is created
		// for real, with its Pod Security labels. Nothing else is.
		applyForReal(t, cp.Kubectl, objectsOf(base, "Namespace"))
		// The e2e deputy's ValidatingWebhookConfiguration, written by
		// `deputy config apiserver`, has the base's name and a url
		// clientConfig; kubectl apply would merge the base's service into it
		// (url and service: invalid). An operator deletes it first
		// (docs/install.md); the test sets it aside for the dry run and puts
		// it back (no other test runs meanwhile: the package's tests are
		// sequential).
		setAsideValidatingWebhook(t)
		out, stderr, err := cp.Kubectl(t.Context(), nil, "apply", "-k", repoPath("manifests", "base"), "--dry-run=server")
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server: %v\n%s\n%s", err, out, stderr)
		}
		if strings.Contains(stderr, "PodSecurity") {
			t.Errorf("Pod Security warnings:\n%s", stderr)
		}
		for _, o := range base {
			want := strings.ToLower(o.GetKind()) + "/" + o.GetName() + " "
			if o.GroupVersionKind().Group != "" {
				want = strings.ToLower(o.GetKind()) + "." + o.GroupVersionKind().Group + "/" + o.GetName() + " "
			}
			if !strings.Contains(out, want) {
				t.Errorf("kubectl's output names no %s; output:\n%s", strings.TrimSpace(want), out)
			}
		}
		if n := strings.Count(out, "(server dry run)"); n != len(base) {
			t.Errorf("%d objects dry-run, want %d:\n%s", n, len(base), out)
		}
	})

	t.Run("deputy's Pod is admitted at the restricted Pod Security level", func(t *testing.T) {
		applyForReal(t, cp.Kubectl, objectsOf(base, "Namespace"))
		deployments := objectsOf(base, "Deployment")
		if len(deployments) != 1 {
			t.Fatalf("%d Deployments in the base, want 1", len(deployments))
		}
		var tmpl appsv1.Deployment
		fromUnstructured(t, deployments[0], &tmpl)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "deputy-psa-check", Namespace: deputyNamespace, Labels: tmpl.Spec.Template.Labels},
			Spec: tmpl.Spec.Template.Spec}
		cfg := rest.CopyConfig(cp.Admin)
		warnings := &warningRecorder{}
		cfg.WarningHandler = warnings
		cs := kubernetes.NewForConfigOrDie(cfg)
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if _, err := cs.CoreV1().Pods(deputyNamespace).Create(t.Context(), pod, dryRun); err != nil {
			t.Fatalf("deputy's Pod was rejected: %v", err)
		}
		if len(warnings.messages) > 0 {
			t.Errorf("warnings: %q", warnings.messages)
		}
		// The control: the same Pod allowed to escalate privileges is
		// refused, so the check above did run.
		escalating := pod.DeepCopy()
		escalating.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = new(true)
		if _, err := cs.CoreV1().Pods(deputyNamespace).Create(t.Context(), escalating, dryRun); err == nil || !strings.Contains(err.Error(), "restricted") {
			t.Errorf("a Pod with allowPrivilegeEscalation in %s: %v, want rejected by Pod Security restricted", deputyNamespace, err)
		}
	})

	t.Run("the cert-manager overlay renders deputy's CA, serving and client certificates", func(t *testing.T) {
		objs := kustomize(t, repoPath("manifests", "overlays", "cert-manager"))
		certificates := map[string]*unstructured.Unstructured{}
		for _, o := range objectsOf(objs, "Certificate") {
			if o.GetAPIVersion() != "cert-manager.io/v1" || o.GetNamespace() != deputyNamespace {
				t.Errorf("Certificate %s: apiVersion %s namespace %q", o.GetName(), o.GetAPIVersion(), o.GetNamespace())
			}
			certificates[o.GetName()] = o
		}
		issuers := map[string]*unstructured.Unstructured{}
		for _, o := range objectsOf(objs, "Issuer") {
			issuers[o.GetName()] = o
		}
		str := func(o *unstructured.Unstructured, path ...string) string {
			if o == nil {
				return "<missing>"
			}
			s, _, _ := unstructured.NestedString(o.Object, path...)
			return s
		}
		strs := func(o *unstructured.Unstructured, path ...string) []string {
			if o == nil {
				return nil
			}
			s, _, _ := unstructured.NestedStringSlice(o.Object, path...)
			return s
		}
		ca, serving, client := certificates["deputy-ca"], certificates["deputy-serving-cert"], certificates["deputy-kube-apiserver-client"]
		selfSigned, caIssuer := issuers["deputy-selfsigned"], issuers["deputy-ca"]
		if len(certificates) != 3 || len(issuers) != 2 || selfSigned == nil || caIssuer == nil {
			t.Fatalf("Certificates %v and Issuers %v, want deputy-ca, deputy-serving-cert, deputy-kube-apiserver-client and deputy-selfsigned, deputy-ca",
				sortedKeys(certificates), sortedKeys(issuers))
		}
		if _, ok, _ := unstructured.NestedMap(selfSigned.Object, "spec", "selfSigned"); !ok {
			t.Errorf("Issuer deputy-selfsigned is not selfSigned")
		}
		isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA")
		if !isCA || str(ca, "spec", "issuerRef", "name") != "deputy-selfsigned" || str(caIssuer, "spec", "ca", "secretName") != str(ca, "spec", "secretName") {
			t.Errorf("the CA chain is not self-signed Issuer -> CA Certificate -> CA Issuer")
		}
		if str(serving, "spec", "secretName") != "deputy-serving-cert" || str(serving, "spec", "issuerRef", "name") != "deputy-ca" ||
			!slices.Contains(strs(serving, "spec", "dnsNames"), "deputy.deputy-system.svc") {
			t.Errorf("serving Certificate: secret %q issuer %q dnsNames %v, want Secret deputy-serving-cert from deputy-ca for deputy.deputy-system.svc",
				str(serving, "spec", "secretName"), str(serving, "spec", "issuerRef", "name"), strs(serving, "spec", "dnsNames"))
		}
		if str(client, "spec", "commonName") != "kube-apiserver" || str(client, "spec", "issuerRef", "name") != "deputy-ca" ||
			!slices.Contains(strs(client, "spec", "usages"), "client auth") {
			t.Errorf("client Certificate: commonName %q issuer %q usages %v, want kube-apiserver from deputy-ca for client auth",
				str(client, "spec", "commonName"), str(client, "spec", "issuerRef", "name"), strs(client, "spec", "usages"))
		}
		webhooks := objectsOf(objs, "ValidatingWebhookConfiguration")
		if len(webhooks) != 1 || webhooks[0].GetAnnotations()["cert-manager.io/inject-ca-from"] != deputyNamespace+"/deputy-serving-cert" {
			t.Errorf("the ValidatingWebhookConfiguration lacks cert-manager.io/inject-ca-from: %s/deputy-serving-cert", deputyNamespace)
		}
		// Everything else is the base.
		if len(objs) != len(base)+5 {
			t.Errorf("the overlay has %d objects, want the base's %d and 5 of cert-manager", len(objs), len(base))
		}
	})

	t.Run("the fixed clusterIP overlay in manifests/apiserver/README.md renders", func(t *testing.T) {
		readme, err := os.ReadFile(repoPath("manifests", "apiserver", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		const start = "```yaml\n# my-deputy/kustomization.yaml\n"
		_, rest, ok := strings.Cut(string(readme), start)
		snippet, _, ok2 := strings.Cut(rest, "```")
		if !ok || !ok2 {
			t.Fatalf("README.md has no block starting %q", start)
		}
		dir := t.TempDir()
		rel, err := filepath.Rel(dir, repoPath("manifests"))
		if err != nil {
			t.Fatal(err)
		}
		for _, variant := range []string{"overlays/cert-manager", "base"} {
			k := strings.ReplaceAll(snippet, "../manifests/overlays/cert-manager", filepath.ToSlash(filepath.Join(rel, variant)))
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
				t.Fatal(err)
			}
			objs := kustomize(t, dir)
			svc := objectsOf(objs, "Service")
			ip, _, _ := unstructured.NestedString(svc[0].Object, "spec", "clusterIP")
			if ip != "10.96.0.100" {
				t.Errorf("%s: Service clusterIP %q, want 10.96.0.100", variant, ip)
			}
			if variant == "overlays/cert-manager" {
				for _, c := range objectsOf(objs, "Certificate") {
					ips, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "ipAddresses")
					if (c.GetName() == "deputy-serving-cert") != slices.Contains(ips, "10.96.0.100") {
						t.Errorf("Certificate %s ipAddresses %v", c.GetName(), ips)
					}
				}
			}
		}
	})

	t.Run("the kubeadm and kind configurations pass deputy's files to kube-apiserver", checkControlPlaneConfigs)

	// docs/install.md checks an installation with kubectl auth can-i for
	// deputy's own impersonator; here the e2e deputy's impersonator is Argo
	// CD's application controller.
	t.Run("kubectl auth can-i impersonate answers with the gate's reason", func(t *testing.T) {
		out, stderr, _ := cp.Kubectl(t.Context(), nil, "auth", "can-i", "impersonate", "serviceaccounts/nobody", "-n", "nowhere",
			"--as", "system:serviceaccount:argocd:argocd-application-controller")
		if !strings.HasPrefix(out, "no - deputy impersonation gate: ") {
			t.Errorf("kubectl auth can-i = %q (stderr %q), want no and the gate's reason", out, stderr)
		}
	})

	t.Run("deputy with the base's configuration and ServiceAccount becomes ready", func(t *testing.T) {
		runBaseDeputy(t, base)
	})
}

// checkControlPlaneConfigs decodes manifests/apiserver/kubeadm.yaml and the
// ClusterConfiguration patch in kind.yaml strictly as kubeadm v1beta4 (what
// kubeadm 1.37 reads) and checks that they name the files `deputy config
// apiserver --dir /etc/kubernetes/deputy` writes, mounted read-only.
func checkControlPlaneConfigs(t *testing.T) {
	const dir = "/etc/kubernetes/deputy"
	data, err := os.ReadFile(repoPath("manifests", "apiserver", "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kubeadm kubeadmv1beta4.ClusterConfiguration
	if err := yaml.UnmarshalStrict(data, &kubeadm); err != nil {
		t.Fatalf("kubeadm.yaml: %v", err)
	}
	check := func(name string, c kubeadmv1beta4.ClusterConfiguration) {
		if c.APIVersion != kubeadmv1beta4.SchemeGroupVersion.String() || c.Kind != "ClusterConfiguration" {
			t.Errorf("%s: %s %s, want %s ClusterConfiguration", name, c.APIVersion, c.Kind, kubeadmv1beta4.SchemeGroupVersion)
		}
		args := map[string]string{}
		for _, a := range c.APIServer.ExtraArgs {
			args[a.Name] = a.Value
		}
		want := map[string]string{
			"authorization-config":                     dir + "/" + manifests.AuthorizationConfigFile,
			"authentication-token-webhook-config-file": dir + "/" + manifests.AuthenticationKubeconfigFile,
			"authentication-token-webhook-version":     "v1",
			"authentication-token-webhook-cache-ttl":   "30s",
		}
		if diff := cmp.Diff(want, args); diff != "" {
			t.Errorf("%s: apiServer.extraArgs (-want +got):\n%s", name, diff)
		}
		wantVolumes := []kubeadmv1beta4.HostPathMount{{Name: "deputy", HostPath: dir, MountPath: dir, ReadOnly: true, PathType: corev1.HostPathDirectory}}
		if diff := cmp.Diff(wantVolumes, c.APIServer.ExtraVolumes); diff != "" {
			t.Errorf("%s: apiServer.extraVolumes (-want +got):\n%s", name, diff)
		}
	}
	check("kubeadm.yaml", kubeadm)

	data, err = os.ReadFile(repoPath("manifests", "apiserver", "kind.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kind struct {
		Kind                 string   `json:"kind"`
		APIVersion           string   `json:"apiVersion"`
		KubeadmConfigPatches []string `json:"kubeadmConfigPatches"`
		Networking           struct {
			ServiceSubnet string `json:"serviceSubnet"`
		} `json:"networking"`
		Nodes []struct {
			Role        string `json:"role"`
			ExtraMounts []struct {
				HostPath      string `json:"hostPath"`
				ContainerPath string `json:"containerPath"`
				ReadOnly      bool   `json:"readOnly"`
			} `json:"extraMounts"`
		} `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(data, &kind); err != nil {
		t.Fatalf("kind.yaml: %v", err)
	}
	if kind.APIVersion != "kind.x-k8s.io/v1alpha4" || kind.Kind != "Cluster" {
		t.Errorf("kind.yaml: %s %s, want kind.x-k8s.io/v1alpha4 Cluster", kind.APIVersion, kind.Kind)
	}
	if len(kind.KubeadmConfigPatches) != 1 {
		t.Fatalf("kind.yaml: %d kubeadmConfigPatches, want 1", len(kind.KubeadmConfigPatches))
	}
	var patch kubeadmv1beta4.ClusterConfiguration
	if err := yaml.UnmarshalStrict([]byte(kind.KubeadmConfigPatches[0]), &patch); err != nil {
		t.Fatalf("kind.yaml kubeadmConfigPatches[0]: %v", err)
	}
	check("kind.yaml kubeadmConfigPatches[0]", patch)
	var mounts int
	for _, n := range kind.Nodes {
		for _, m := range n.ExtraMounts {
			mounts++
			if n.Role != "control-plane" || m.ContainerPath != dir || !m.ReadOnly || m.HostPath != "deputy-apiserver" {
				t.Errorf("kind.yaml: %s extraMount %+v, want deputy-apiserver read-only at %s on the control plane", n.Role, m, dir)
			}
		}
	}
	if mounts != 1 {
		t.Errorf("kind.yaml: %d extraMounts, want 1", mounts)
	}
	if _, subnet, err := net.ParseCIDR(kind.Networking.ServiceSubnet); err != nil || !subnet.Contains(net.ParseIP("10.96.0.100")) {
		t.Errorf("kind.yaml: serviceSubnet %q does not hold deputy's Service IP 10.96.0.100 (manifests/apiserver/README.md)", kind.Networking.ServiceSubnet)
	}
}

// runBaseDeputy starts a separate kube-apiserver (plain Node and RBAC
// authorization, deputy's CRDs), applies the base's Namespace, ServiceAccount
// and RBAC for real, and runs deputy with the base's configuration file
// (paths moved to a temporary directory) under a token of the base's
// ServiceAccount: /readyz turns green only when every informer of cluster
// mode lists and watches, so this proves the ClusterRole and Role are enough.
// A separate control plane keeps this second cluster-mode deputy (and its
// leader election and Application controller) away from the e2e one.
func runBaseDeputy(t *testing.T, base []*unstructured.Unstructured) {
	assets, err := framework.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			repoPath("manifests", "crds"),
			repoPath("manifests", "testing"),
		},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	if _, err := env.Start(); err != nil {
		t.Fatalf("start a second kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "manifests-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(adminKubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := func(ctx context.Context, stdin []byte, args ...string) (string, string, error) {
		return framework.Kubectl(ctx, stdin, append([]string{"--kubeconfig", adminKubeconfig}, args...)...)
	}
	applyForReal(t, kubectl, objectsOf(base, "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"))

	cs := kubernetes.NewForConfigOrDie(admin.Config())
	token, err := cs.CoreV1().ServiceAccounts(deputyNamespace).CreateToken(t.Context(), "deputy",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s/deputy: %v", deputyNamespace, err)
	}
	saKubeconfig := filepath.Join(dir, "deputy.kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"e2e": {Server: admin.Config().Host, CertificateAuthorityData: admin.Config().CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"deputy": {Token: token.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"e2e": {Cluster: "e2e", AuthInfo: "deputy"}},
		CurrentContext: "e2e",
	}, saKubeconfig); err != nil {
		t.Fatal(err)
	}

	// The Pod's files: certificates (Secret deputy-serving-cert), the
	// policy (ConfigMap deputy-policy) and the Git cache (an emptyDir).
	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "tls")
	if _, err := framework.CLI(bin, "certs", "init", "--dir", certDir, "--hosts", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	policyDir := filepath.Join(dir, "policy")
	if err := os.Mkdir(policyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range configMapData(t, base, "deputy-policy") {
		if err := os.WriteFile(filepath.Join(policyDir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	configMaps := objectsOf(base, "ConfigMap")
	var cfgName string
	for _, o := range configMaps {
		if strings.HasPrefix(o.GetName(), "deputy-config-") {
			cfgName = o.GetName()
		}
	}
	cfg := configMapData(t, base, cfgName)["config.yaml"]
	cfg = strings.NewReplacer(
		"/etc/deputy/tls/", certDir+"/",
		"/etc/deputy/policy", policyDir,
		"/var/cache/deputy/repos", filepath.Join(dir, "repos"),
	).Replace(cfg)
	for _, line := range strings.Split(cfg, "\n") {
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") && (strings.Contains(l, "/etc/deputy") || strings.Contains(l, "/var/cache/deputy")) {
			t.Fatalf("the base's configuration names a Pod path this test does not provide: %q", l)
		}
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// As in the Pod: POD_NAMESPACE from the downward API; --in-cluster is
	// replaced by the ServiceAccount's kubeconfig.
	t.Setenv("POD_NAMESPACE", deputyNamespace)
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: certDir,
		Args: []string{"--config", cfgFile, "--kubeconfig", saKubeconfig}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := d.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, d.Logs())
	}
	// Leader election with the Role: the replica holds Lease deputy-sync
	// (sync.leaderElection.leaseName) in its namespace.
	for {
		lease, err := cs.CoordinationV1().Leases(deputyNamespace).Get(ctx, "deputy-sync", metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("Lease %s/deputy-sync has no holder: %v\n%s", deputyNamespace, err, d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(strings.ToLower(d.Logs()), "forbidden") {
		t.Errorf("deputy was refused something as its ServiceAccount:\n%s", d.Logs())
	}

	// tls.clientCAFile and allowedClientNames: the review endpoints want
	// kube-apiserver's client certificate.
	sar := []byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","resourceAttributes":{"verb":"get","resource":"pods"}}}`)
	for _, withCert := range []bool{true, false} {
		c, err := d.Client(withCert)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Post(d.URL+manifests.AuthorizePath, "application/json", bytes.NewReader(sar))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if want := map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[withCert]; resp.StatusCode != want {
			t.Errorf("POST /authorize with client certificate %t: %d, want %d", withCert, resp.StatusCode, want)
		}
	}
}

// setAsideValidatingWebhook deletes the ValidatingWebhookConfiguration
// "deputy" until the test ends, then creates it again as it was.
func setAsideValidatingWebhook(t *testing.T) {
	t.Helper()
	webhooks := kubernetes.NewForConfigOrDie(cp.Admin).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	saved, err := webhooks.Get(t.Context(), manifests.ValidatingWebhookConfigurationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhooks.Delete(t.Context(), saved.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		saved.ResourceVersion, saved.UID, saved.ManagedFields = "", "", nil
		if _, err := webhooks.Create(context.Background(), saved, metav1.CreateOptions{}); err != nil {
			t.Errorf("restoring ValidatingWebhookConfiguration %s: %v", saved.Name, err)
		}
	})
}

func repoPath(parts ...string) string {
	return filepath.Join(append([]string{framework.RepoRoot()}, parts...)...)
}

// kustomize renders dir with `kubectl kustomize` (kubectl's kustomize, as
// operators run it) and decodes the objects.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := framework.Kubectl(t.Context(), nil, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kubectl kustomize %s: output does not decode: %v", dir, err)
		}
		if o != nil {
			objs = append(objs, &unstructured.Unstructured{Object: o})
		}
	}
	if len(objs) == 0 {
		t.Fatalf("kubectl kustomize %s rendered nothing", dir)
	}
	return objs
}

// applyForReal applies objs with kubectl (not a dry run).
func applyForReal(t *testing.T, kubectl func(context.Context, []byte, ...string) (string, string, error), objs []*unstructured.Unstructured) {
	t.Helper()
	var docs [][]byte
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, data)
	}
	if out, stderr, err := kubectl(t.Context(), bytes.Join(docs, []byte("---\n")), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, stderr)
	}
}

func objectsOf(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

func configMapData(t *testing.T, objs []*unstructured.Unstructured, name string) map[string]string {
	t.Helper()
	for _, o := range objectsOf(objs, "ConfigMap") {
		if o.GetName() == name {
			data, _, err := unstructured.NestedStringMap(o.Object, "data")
			if err != nil || len(data) == 0 {
				t.Fatalf("ConfigMap %s has no data: %v", name, err)
			}
			return data
		}
	}
	t.Fatalf("no ConfigMap %q in the base", name)
	return nil
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// warningRecorder collects the API server's warnings (rest.WarningHandler).
type warningRecorder struct{ messages []string }

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, message string) {
	w.messages = append(w.messages, message)
}
