package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestSyncSourcesDefaults(t *testing.T) {
	c := Default()
	s := c.Sync.SyncSources
	if len(s.LocalRepositories) != 0 || s.Kustomize.RemoteResources {
		t.Errorf("local repositories %v, remote resources %v: both must be off by default", s.LocalRepositories, s.Kustomize.RemoteResources)
	}
	l := s.Limits
	for name, got := range map[string]string{
		"maxFileBytes": l.MaxFileBytes.String(), "maxRenderBytes": l.MaxRenderBytes.String(), "maxFetchBytes": l.MaxFetchBytes.String(),
		"maxRenderMemory": l.MaxRenderMemory.String(),
	} {
		want := map[string]string{"maxFileBytes": "32Mi", "maxRenderBytes": "256Mi", "maxFetchBytes": "2Gi", "maxRenderMemory": "1Gi"}[name]
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if l.MaxFiles != 20000 || l.MaxObjects != 10000 || l.MaxFetchObjects != 500000 || l.OperationTimeout.Duration != 30*time.Minute || s.Kustomize.RemoteTimeout.Duration != 30*time.Second {
		t.Errorf("limits = %+v, remoteTimeout %s", l, s.Kustomize.RemoteTimeout.Duration)
	}
	if errs := Validate(c); len(errs) != 0 {
		t.Errorf("the defaults do not validate: %v", errs)
	}
}

func TestSyncSourcesDecode(t *testing.T) {
	c, err := Decode("test", []byte(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
sync:
  localRepositories: [/srv/git]
  kustomize: {remoteResources: true, remoteTimeout: 5s}
  limits: {maxFileBytes: 1Mi, maxRenderBytes: "100000000", maxFiles: 5, maxObjects: 6, maxRenderMemory: 512Mi, maxFetchBytes: 1Gi, maxFetchObjects: 7, operationTimeout: 2m}
`))
	if err != nil {
		t.Fatal(err)
	}
	SetDefaults(c)
	l := c.Sync.Limits
	if l.MaxFileBytes.Value() != 1<<20 || l.MaxRenderBytes.Value() != 100000000 || l.MaxFiles != 5 || l.MaxObjects != 6 ||
		l.MaxRenderMemory.Value() != 512<<20 || l.MaxFetchBytes.Value() != 1<<30 || l.MaxFetchObjects != 7 || l.OperationTimeout.Duration != 2*time.Minute {
		t.Errorf("limits = %+v", l)
	}
	if !c.Sync.Kustomize.RemoteResources || c.Sync.Kustomize.RemoteTimeout.Duration != 5*time.Second || c.Sync.LocalRepositories[0] != "/srv/git" {
		t.Errorf("sync = %+v", c.Sync.SyncSources)
	}
	if _, err := Decode("test", []byte("apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nsync:\n  limits: {maxFileByte: 1Mi}\n")); err == nil {
		t.Error("an unknown limit was accepted")
	}
}

func TestSyncSourcesValidation(t *testing.T) {
	cache, _ := filepath.Abs(DefaultSyncCacheDir)
	for _, tc := range []struct {
		name   string
		mutate func(c *DeputyConfiguration)
		want   string // "" = valid
	}{
		{"a directory of repositories", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{"/srv/git"} }, ""},
		{"a relative directory", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{"srv/git"} }, "sync.localRepositories[0]: Invalid value: \"srv/git\": must be an absolute directory"},
		{"the cache itself", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{cache} }, "overlaps sync.cacheDir"},
		{"a directory holding the cache", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{filepath.Dir(cache)} }, "overlaps sync.cacheDir"},
		{"a directory inside the cache", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{filepath.Join(cache, "repos")} }, "overlaps sync.cacheDir"},
		{"the root", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{"/"} }, "overlaps"},
		{"the cache by a path with dot segments", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{cache + "/../repos"} }, "overlaps sync.cacheDir"},
		{"the TLS directory", func(c *DeputyConfiguration) {
			c.TLS.CertDir = "/etc/deputy/tls"
			c.Sync.LocalRepositories = []string{"/etc/deputy"}
		}, "overlaps tls.certDir"},
		{"a directory holding the serving key", func(c *DeputyConfiguration) {
			c.TLS.CertFile, c.TLS.KeyFile = "/srv/git/tls.crt", "/srv/git/tls.key"
			c.Sync.LocalRepositories = []string{"/srv/git"}
		}, "overlaps tls.certFile"},
		{"the ServiceAccount token's directory", func(c *DeputyConfiguration) {
			c.Sync.LocalRepositories = []string{"/var/run/secrets/kubernetes.io/serviceaccount"}
		}, "overlaps the Pod's secrets (/var/run/secrets)"},
		{"a directory holding /run/secrets", func(c *DeputyConfiguration) { c.Sync.LocalRepositories = []string{"/run"} }, "overlaps the Pod's secrets"},
		{"a directory holding a repository credential", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://git.example.com/", UsernameFile: "/srv/git/creds/user", PasswordFile: "/srv/git/creds/pass"}}
			c.Sync.LocalRepositories = []string{"/srv/git"}
		}, "overlaps sync.repositories[0].usernameFile"},
		{"a directory holding the policy", func(c *DeputyConfiguration) {
			c.Policy.Paths = []string{"/srv/git/policy"}
			c.Sync.LocalRepositories = []string{"/srv/git"}
		}, "overlaps policy.paths[0]"},
		{"a fractional byte limit", func(c *DeputyConfiguration) { c.Sync.Limits.MaxFileBytes = resource.MustParse("1500m") }, "sync.limits.maxFileBytes"},
		{"a byte limit under 1Ki", func(c *DeputyConfiguration) { c.Sync.Limits.MaxRenderBytes = resource.MustParse("10") }, "sync.limits.maxRenderBytes"},
		{"a negative fetch limit", func(c *DeputyConfiguration) { c.Sync.Limits.MaxFetchBytes = resource.MustParse("-1Gi") }, "sync.limits.maxFetchBytes"},
		{"a file limit over the render limit", func(c *DeputyConfiguration) {
			c.Sync.Limits.MaxFileBytes = resource.MustParse("512Mi")
		}, "sync.limits.maxFileBytes: Invalid value: \"512Mi\": must not be more than maxRenderBytes"},
		{"a negative file count", func(c *DeputyConfiguration) { c.Sync.Limits.MaxFiles = -1 }, "sync.limits.maxFiles"},
		{"a negative object count", func(c *DeputyConfiguration) { c.Sync.Limits.MaxObjects = -1 }, "sync.limits.maxObjects"},
		{"a render memory under 64Mi", func(c *DeputyConfiguration) { c.Sync.Limits.MaxRenderMemory = resource.MustParse("32Mi") }, "sync.limits.maxRenderMemory: Invalid value: \"32Mi\": must be a whole number of bytes, at least 64Mi"},
		{"a render memory under the render bytes", func(c *DeputyConfiguration) { c.Sync.Limits.MaxRenderMemory = resource.MustParse("128Mi") }, "sync.limits.maxRenderMemory: Invalid value: \"128Mi\": must not be less than maxRenderBytes (256Mi)"},
		{"a smaller render memory with smaller render bytes", func(c *DeputyConfiguration) {
			c.Sync.Limits.MaxRenderMemory, c.Sync.Limits.MaxRenderBytes = resource.MustParse("128Mi"), resource.MustParse("64Mi")
		}, ""},
		{"a negative fetch object count", func(c *DeputyConfiguration) { c.Sync.Limits.MaxFetchObjects = -1 }, "sync.limits.maxFetchObjects"},
		{"a tiny operation timeout", func(c *DeputyConfiguration) { c.Sync.Limits.OperationTimeout.Duration = time.Second }, "sync.limits.operationTimeout"},
		{"a tiny remote timeout", func(c *DeputyConfiguration) { c.Sync.Kustomize.RemoteTimeout.Duration = time.Millisecond }, "sync.kustomize.remoteTimeout"},
		{"a credential URL with user info", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://git.example.com@attacker.net/", UsernameFile: "/u", PasswordFile: "/p"}}
		}, "sync.repositories[0].url"},
		{"a credential URL with dot segments", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://git.example.com/team-a/../team-b", UsernameFile: "/u", PasswordFile: "/p"}}
		}, "must not contain . or .. path segments"},
		{"a credential URL with a query", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://git.example.com/team-a?x=1", UsernameFile: "/u", PasswordFile: "/p"}}
		}, "must not have a query"},
		{"an ssh credential URL", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "ssh://git@git.example.com/team-a", UsernameFile: "/u", PasswordFile: "/p"}}
		}, "must be an https://"},
		{"an OCI registry's credential URL", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "oci://registry.example.com/charts", UsernameFile: "/u", PasswordFile: "/p"}}
		}, ""},
		{"an OCI credential URL with user info", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "oci://me@registry.example.com/charts", UsernameFile: "/u", PasswordFile: "/p"}}
		}, "must not carry user info"},
		{"a credential URL for a path", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://git.example.com:8443/team-a/", UsernameFile: "/u", PasswordFile: "/p"}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			errs := Validate(c)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Errorf("errors: %v", errs)
				}
				return
			}
			if !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors %v, want one containing %q", errs, tc.want)
			}
		})
	}
}
