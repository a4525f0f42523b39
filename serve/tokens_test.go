package serve

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"deputy.dev/deputy/config"
)

func TestTokenChainOptionsDelegation(t *testing.T) {
	cluster := &rest.Config{Host: "https://cluster.example"}
	tests := []struct {
		name    string
		enabled *bool
		cluster *rest.Config
		want    bool
	}{
		{name: "file mode has no delegated review by default", want: false},
		{name: "cluster mode has one by default", cluster: cluster, want: true},
		{name: "cluster mode can turn it off", enabled: ptr.To(false), cluster: cluster, want: false},
		{name: "enabling it in file mode is passed on, for NewChains to refuse", enabled: ptr.To(true), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Authentication.Delegated.Enabled = tt.enabled
			o, err := tokenChainOptions(cfg.Authentication, tt.cluster)
			if err != nil {
				t.Fatal(err)
			}
			if o.Delegated.Enabled != tt.want || o.ClusterConfig != tt.cluster {
				t.Errorf("Delegated.Enabled = %v, ClusterConfig = %v; want %v, %v", o.Delegated.Enabled, o.ClusterConfig, tt.want, tt.cluster)
			}
			if o.Delegated.CacheTTL != 10*time.Second || o.Delegated.FailureCacheTTL != 10*time.Second || o.Delegated.Timeout != 10*time.Second {
				t.Errorf("Delegated = %+v, want the configuration's 10s TTLs and timeout", o.Delegated)
			}
			if o.ProjectTokens.Issuer != config.DefaultProjectTokenIssuer || len(o.APIAudiences) != 1 {
				t.Errorf("ProjectTokens.Issuer = %q, APIAudiences = %v: want the configuration's defaults", o.ProjectTokens.Issuer, o.APIAudiences)
			}
		})
	}
}
