package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if errs := Validate(c); len(errs) > 0 {
		t.Fatalf("the embedded default is invalid: %v", errs)
	}
	if c.Listen != "127.0.0.1:8443" || c.TLS.CertDir != ".deputy/certs" || c.Authorization.DefaultDecision != "NoOpinion" {
		t.Errorf("unexpected defaults: %+v", c)
	}
}

func TestSetDefaultsKeepsCertDirUnsetWhenCertFilesAreGiven(t *testing.T) {
	c := &DeputyConfiguration{TLS: TLS{CertFile: "a.crt", KeyFile: "a.key"}}
	SetDefaults(c)
	if c.TLS.CertDir != "" {
		t.Errorf("certDir = %q, want empty when certFile/keyFile are set", c.TLS.CertDir)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string
		check   func(t *testing.T, c *DeputyConfiguration)
	}{
		{
			name: "a complete file decodes",
			in: `apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
listen: ":9443"
tls: {certDir: /certs, allowedClientNames: [kube-apiserver, front-proxy]}
policy: {paths: [/etc/deputy/policy], pollInterval: 1m}
authorization: {defaultDecision: Deny}
authentication: {apiAudiences: [https://example]}
shutdown: {delay: 5s, gracePeriod: 20s}
logging: {level: debug, format: json}
`,
			check: func(t *testing.T, c *DeputyConfiguration) {
				if c.Listen != ":9443" || c.Policy.PollInterval.Duration != time.Minute || c.Shutdown.Delay.Duration != 5*time.Second {
					t.Errorf("decoded %+v", c)
				}
				if diff := cmp.Diff([]string{"kube-apiserver", "front-proxy"}, c.TLS.AllowedClientNames); diff != "" {
					t.Error(diff)
				}
			},
		},
		{name: "an unknown field is an error naming it", in: "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nlistn: x\n", wantErr: `unknown field "listn"`},
		{name: "a wrong-case field is an error", in: "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nListen: x\n", wantErr: `unknown field "Listen"`},
		{name: "a duplicate field is an error", in: "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nlisten: a\nlisten: b\n", wantErr: "listen"},
		{name: "a wrong kind is an error", in: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "want config.deputy.dev/v1alpha1/DeputyConfiguration"},
		{name: "invalid YAML is an error naming the file", in: "listen: [", wantErr: "deputy.yaml: not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode("deputy.yaml", []byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestValidateReportsEveryErrorWithItsField(t *testing.T) {
	c := Default()
	c.Listen = "nonsense"
	c.TLS.CertFile = "only-cert.pem"
	c.TLS.MinVersion = "VersionTLS10"
	c.Authorization.DefaultDecision = "Allow"
	c.Logging.Level = "loud"
	c.Policy.PollInterval.Duration = time.Millisecond
	errs := Validate(c)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	want := []string{"listen", "tls.keyFile", "tls.minVersion", "policy.pollInterval", "authorization.defaultDecision", "logging.level"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s\nerrors: %v", diff, errs)
	}
}
