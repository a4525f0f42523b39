package cluster

import (
	"context"
	"slices"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/restmapper"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Capabilities are what a Helm chart sees of its destination
// (.Capabilities.KubeVersion and .Capabilities.APIVersions), read from the
// discovery the operation made as its identity: Argo CD passes the
// destination cluster's version and API versions to helm template unless
// spec.source.helm sets kubeVersion or apiVersions.
type Capabilities struct {
	// KubeVersion is the destination's GitVersion ("v1.37.2"); "" when
	// /version could not be read (the render then takes Helm's default).
	KubeVersion string
	// APIVersions are "GROUP/VERSION" and "GROUP/VERSION/KIND" of every
	// served resource ("v1", "v1/ConfigMap" for the core group), sorted:
	// the set helm's GetVersionSet builds from a live cluster.
	APIVersions []string
}

// ReadCapabilities reads the destination's version with dc (made as the
// operation's identity; /version is public to every authenticated user
// through system:public-info-viewer) and lists groups' versions and kinds.
// A failure to read the version is not an error: the render falls back to
// Helm's default, as `helm template` does offline.
func ReadCapabilities(ctx context.Context, dc discovery.DiscoveryInterface, groups []*restmapper.APIGroupResources) (Capabilities, error) {
	var c Capabilities
	if v, err := dc.ServerVersion(); err == nil {
		c.KubeVersion = v.GitVersion
	} else if ctx.Err() != nil {
		return c, ctx.Err()
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for version, resources := range g.VersionedResources {
			gv := version
			if g.Group.Name != "" {
				gv = g.Group.Name + "/" + version
			}
			seen[gv] = true
			for _, r := range resources {
				if strings.Contains(r.Name, "/") || r.Kind == "" {
					continue // a subresource names its parent's kind
				}
				seen[gv+"/"+r.Kind] = true
			}
		}
	}
	for v := range seen {
		c.APIVersions = append(c.APIVersions, v)
	}
	slices.Sort(c.APIVersions)
	return c, nil
}

// withCapabilities returns src with spec.source.helm's kubeVersion and
// apiVersions taken from the destination where the Application leaves them
// empty (Argo CD's defaults). src.Helm is copied, never modified.
func withCapabilities(src v1alpha1.ApplicationSource, c Capabilities) v1alpha1.ApplicationSource {
	h := src.Helm.DeepCopy()
	if h == nil {
		h = &v1alpha1.HelmSource{}
	}
	if h.KubeVersion == "" {
		h.KubeVersion = c.KubeVersion
	}
	if len(h.APIVersions) == 0 {
		h.APIVersions = c.APIVersions
	}
	src.Helm = h
	return src
}

// AppWithCapabilities returns a copy of app whose every source (spec.source,
// or each of spec.sources) has withCapabilities' defaults.
func AppWithCapabilities(app *v1alpha1.Application, c Capabilities) *v1alpha1.Application {
	app = app.DeepCopy()
	if app.Spec.HasMultipleSources() {
		for i := range app.Spec.Sources {
			app.Spec.Sources[i] = withCapabilities(app.Spec.Sources[i], c)
		}
	} else {
		app.Spec.Source = withCapabilities(app.Spec.Source, c)
	}
	return app
}
