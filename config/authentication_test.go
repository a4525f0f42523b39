package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const authHeader = "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\n"

func TestDecodeAuthentication(t *testing.T) {
	c, err := Decode("deputy.yaml", []byte(authHeader+`authentication:
  apiAudiences: [https://kubernetes.default.svc.cluster.local]
  jwt:
  - issuer:
      url: https://idp.example.com
      audiences: [deputy-cli]
    certificateAuthorityFile: /etc/deputy/idp-ca.crt
    claimMappings:
      username: {claim: email, prefix: "oidc:"}
      groups: {claim: groups, prefix: "oidc:"}
    claimValidationRules:
    - claim: hd
      requiredValue: example.com
  projectTokens:
    signingKeyFile: /etc/deputy/tokens/key.pem
    verificationKeyFiles: [/etc/deputy/tokens/previous.pub]
    revocationFile: /etc/deputy/tokens/revoked.txt
  delegated:
    cacheTTL: 30s
    failureCacheTTL: 5s
    timeout: 3s
`))
	if err != nil {
		t.Fatalf("Decode() error = %v", err)
	}
	a := c.Authentication
	j := a.JWT[0]
	if j.Issuer.URL != "https://idp.example.com" || j.CertificateAuthorityFile != "/etc/deputy/idp-ca.crt" ||
		j.ClaimMappings.Username.Claim != "email" || *j.ClaimMappings.Username.Prefix != "oidc:" || j.ClaimValidationRules[0].RequiredValue != "example.com" {
		t.Errorf("jwt[0] decoded as %+v", j)
	}
	if a.ProjectTokens.SigningKeyFile != "/etc/deputy/tokens/key.pem" || a.Delegated.CacheTTL.Duration != 30*time.Second ||
		a.Delegated.FailureCacheTTL.Duration != 5*time.Second || a.Delegated.Timeout.Duration != 3*time.Second {
		t.Errorf("decoded %+v", a)
	}
	in, err := j.Internal()
	if err != nil || in.Issuer.URL != j.Issuer.URL || in.ClaimMappings.Groups.Claim != "groups" {
		t.Errorf("Internal() = %+v, %v", in, err)
	}

	t.Run("an unknown field inside a jwt authenticator is an error", func(t *testing.T) {
		_, err := Decode("deputy.yaml", []byte(authHeader+"authentication:\n  jwt:\n  - issuer: {url: https://idp.example.com, audiences: [a], clientID: x}\n"))
		if err == nil || !strings.Contains(err.Error(), `unknown field "authentication.jwt[0].issuer.clientID"`) {
			t.Errorf("Decode() error = %v", err)
		}
	})
}

func TestAuthenticationDefaults(t *testing.T) {
	c := Default()
	a := c.Authentication
	if a.ProjectTokens.Issuer != DefaultProjectTokenIssuer || a.Delegated.CacheTTL.Duration != 10*time.Second ||
		a.Delegated.FailureCacheTTL.Duration != 10*time.Second || a.Delegated.Timeout.Duration != 10*time.Second {
		t.Errorf("defaults %+v", a)
	}
	if a.ProjectTokens.Enabled() {
		t.Error("project tokens are enabled without keys")
	}
	if a.Delegated.IsEnabled(Cluster{}) || !a.Delegated.IsEnabled(Cluster{InCluster: true}) {
		t.Error("delegation must default to on in cluster mode only")
	}
	off := false
	a.Delegated.Enabled = &off
	if a.Delegated.IsEnabled(Cluster{Kubeconfig: "k"}) {
		t.Error("delegated.enabled=false must win over cluster mode")
	}
}

func TestValidateAuthentication(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// want are "field: detail substring" entries, every one must match an error.
		want []string
	}{
		{name: "a valid OIDC and project token configuration has no errors", yaml: `authentication:
  jwt:
  - issuer: {url: https://idp.example.com, audiences: [deputy-cli]}
    claimMappings: {username: {claim: sub, prefix: "oidc:"}}
  projectTokens: {signingKeyFile: key.pem, revocationFile: revoked.txt}
`},
		{name: "kube-apiserver's issuer rules apply with deputy's paths", yaml: `authentication:
  jwt:
  - issuer: {url: http://idp.example.com, audiences: []}
    claimMappings: {username: {claim: sub}}
`, want: []string{
			"authentication.jwt[0].issuer.url: Invalid value: \"http://idp.example.com\": URL scheme must be https",
			"authentication.jwt[0].issuer.audiences: Required value: at least one authentication.jwt[0].issuer.audiences is required",
			"authentication.jwt[0].claimMappings.username.prefix: ",
		}},
		{name: "duplicate issuers are reported", yaml: `authentication:
  jwt:
  - issuer: {url: https://idp.example.com, audiences: [a]}
    claimMappings: {username: {claim: sub, prefix: ""}}
  - issuer: {url: https://idp.example.com, audiences: [b]}
    claimMappings: {username: {claim: sub, prefix: ""}}
`, want: []string{"authentication.jwt[1].issuer.url: Duplicate value"}},
		{name: "an invalid CEL expression is reported with its field", yaml: `authentication:
  jwt:
  - issuer: {url: https://idp.example.com, audiences: [a]}
    claimMappings: {username: {expression: "claims.sub +"}}
`, want: []string{"authentication.jwt[0].claimMappings.username.expression"}},
		{name: "the CA is given once", yaml: `authentication:
  jwt:
  - issuer: {url: https://idp.example.com, audiences: [a], certificateAuthority: "x"}
    certificateAuthorityFile: ca.crt
    claimMappings: {username: {claim: sub, prefix: ""}}
`, want: []string{"authentication.jwt[0].certificateAuthorityFile: ", "not both"}},
		{name: "an egress selector is refused", yaml: `authentication:
  jwt:
  - issuer: {url: https://idp.example.com, audiences: [a], egressSelectorType: cluster}
    claimMappings: {username: {claim: sub, prefix: ""}}
`, want: []string{"authentication.jwt[0].issuer.egressSelectorType: Forbidden: deputy has no egress selector"}},
		{name: "an OIDC issuer may not be the project token issuer", yaml: `authentication:
  jwt:
  - issuer: {url: "https://deputy.example.com/tokens", audiences: [a]}
    claimMappings: {username: {claim: sub, prefix: ""}}
  projectTokens: {issuer: "https://deputy.example.com/tokens", signingKeyFile: key.pem}
`, want: []string{"authentication.jwt[0].issuer.url", "authentication.projectTokens.issuer"}},
		{name: "delegation needs cluster mode", yaml: "authentication:\n  delegated: {enabled: true}\n",
			want: []string{"authentication.delegated.enabled: ", "cluster.kubeconfig"}},
		{name: "negative TTLs are refused", yaml: "authentication:\n  delegated: {cacheTTL: -1s, timeout: -1s}\n",
			want: []string{"authentication.delegated.cacheTTL: ", "authentication.delegated.timeout: "}},
		{name: "a revocation list needs project tokens", yaml: "authentication:\n  projectTokens: {revocationFile: r.txt}\n",
			want: []string{"authentication.projectTokens.revocationFile: ", "set signingKeyFile or verificationKeyFiles"}},
		{name: "project token files are non-empty and listed once", yaml: `authentication:
  projectTokens: {issuer: "a b", verificationKeyFiles: [k.pub, "", k.pub]}
`, want: []string{"authentication.projectTokens.issuer: ", "verificationKeyFiles[1]: ", "verificationKeyFiles[2]: Duplicate value"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode("deputy.yaml", []byte(authHeader+tc.yaml))
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			SetDefaults(c)
			var got []string
			for _, e := range Validate(c) {
				got = append(got, e.Error())
			}
			if len(tc.want) == 0 && len(got) > 0 {
				t.Fatalf("Validate() = %s", cmp.Diff([]string(nil), got))
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("no error contains %q; errors:\n%s", w, all)
				}
			}
		})
	}
}
