package syncer

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/syncer/cluster"
)

// clients are one operation's API clients. Every one but controller acts as
// the operation's identity: with impersonation, kube-apiserver authenticates
// the controller identity, authorizes it to impersonate the ServiceAccount
// (deputy's gate answers), and then runs the request as the ServiceAccount
// alone (rest.ImpersonationConfig with the username only: constrained
// impersonation lets a ServiceAccount be impersonated by name, never with
// extra groups).
type clients struct {
	// who is the identity's username (the ServiceAccount's, or the
	// controller identity's own); impersonated is the ServiceAccount's, ""
	// without impersonation.
	who, impersonated string
	// raw is an unversioned JSON REST client (server-side apply, get,
	// create): it returns status codes and skips decoding responses.
	raw *rest.RESTClient
	// meta lists object metadata (prune).
	meta metadata.Interface
	// dyn reads, watches and creates whole objects (health, hooks).
	dyn dynamic.Interface
	// kube is the typed clientset (SelfSubjectAccessReviews, namespaces).
	kube kubernetes.Interface
	// mapper maps kinds to resources, from discovery made as the identity.
	mapper meta.RESTMapperWithContext
	// capabilities are the destination's version and API versions as the
	// identity discovers them (a Helm chart's .Capabilities).
	capabilities cluster.Capabilities
	// controller is the controller identity without impersonation: used
	// only to check that the ServiceAccount exists (see checkServiceAccount).
	controller kubernetes.Interface
}

// impersonate is the step every path that touches the destination takes
// (apply, dry run, prune, deletion): derive the identity from the project
// (with the enforcement setting), record it in the operation state, and build
// the clients that act as it.
func (op *operation) impersonate(ctx context.Context, compiled *policy.CompiledProject) (identity, *clients, error) {
	id, err := op.e.deriveIdentity(compiled, op.app, op.server)
	if err != nil {
		return id, nil, err
	}
	op.setIdentity(id.status)
	if op.comparing {
		cl, err := op.comparingClients(ctx, id)
		return id, cl, err
	}
	cl, err := op.clientsFor(ctx, op.server, id)
	return id, cl, err
}

// clientsFor builds the clients of an operation on server as id, runs
// discovery, and logs the impersonation (one line per operation, in the
// words of kube-apiserver's impersonation filter: "X is impersonating Y").
func (op *operation) clientsFor(ctx context.Context, server string, id identity) (*clients, error) {
	e := op.e
	base, err := e.opts.Clusters.RESTConfig(ctx, server)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	if cfg.UserAgent == "" {
		// Every request then names deputy (client-go adds the header in
		// the transport chain; see boundedTransport for why it matters).
		cfg.UserAgent = "deputy (" + rest.DefaultKubernetesUserAgent() + ")"
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// No client-side rate limit: Parallelism bounds the requests in
		// flight, and kube-apiserver's priority and fairness protects it.
		cfg.QPS = -1
	}
	ctrlHTTP, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to build a client for %s: %w", server, err)
	}
	ctrl, err := kubernetes.NewForConfigAndClient(cfg, ctrlHTTP)
	if err != nil {
		return nil, err
	}
	cl := &clients{controller: ctrl}
	controllerName := e.controllerName(ctx, server, ctrl)
	if id.username != "" {
		cfg = rest.CopyConfig(cfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: id.username}
		cl.who, cl.impersonated = id.username, id.username
		op.log.Info("controller identity is impersonating the derived ServiceAccount",
			"impersonator", controllerName, "impersonated", id.username, "decidedBy", id.reason, "server", server,
			"message", controllerName+" is impersonating "+id.username)
	} else {
		cl.who = controllerName
		op.log.Info("syncing as the controller identity, without impersonation", "identity", controllerName, "reason", id.reason, "server", server)
	}

	httpClient := ctrlHTTP
	if id.username != "" {
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
	}
	if cl.raw, err = rest.UnversionedRESTClientForConfigAndClient(dynamic.ConfigFor(cfg), httpClient); err != nil {
		return nil, err
	}
	if cl.meta, err = metadata.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if cl.dyn, err = dynamic.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if cl.kube, err = kubernetes.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	groups, err := restmapper.GetAPIGroupResourcesWithContext(ctx, discovery.ToDiscoveryInterfaceWithContext(dc))
	if groups == nil {
		return nil, fmt.Errorf("API discovery on %s as %s failed: %w", server, cl.who, err)
	}
	if err != nil {
		// Some aggregated API is unavailable; the others are usable.
		op.log.Info("API discovery was partial", "error", err.Error())
	}
	cl.mapper = restmapper.NewDiscoveryRESTMapperWithContext(groups)
	if cl.capabilities, err = cluster.ReadCapabilities(ctx, dc, groups); err != nil {
		return nil, err
	}
	return cl, nil
}

// resourcePath is the REST path of a resource, or of one object when name
// is set. Names and namespaces are checked (plan.go) to be valid path
// segments before they get here.
func resourcePath(gvr schema.GroupVersionResource, namespace, name string) string {
	var b strings.Builder
	if gvr.Group == "" {
		b.WriteString("/api/")
	} else {
		b.WriteString("/apis/")
		b.WriteString(gvr.Group)
		b.WriteByte('/')
	}
	b.WriteString(gvr.Version)
	if namespace != "" {
		b.WriteString("/namespaces/")
		b.WriteString(namespace)
	}
	b.WriteByte('/')
	b.WriteString(gvr.Resource)
	if name != "" {
		b.WriteByte('/')
		b.WriteString(name)
	}
	return b.String()
}

// apply sends one server-side apply (field manager "deputy", conflicts
// forced) and returns the object as the server returned it (JSON) and
// whether it created it.
func (cl *clients) apply(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, body []byte, dryRun bool) (live []byte, created bool, err error) {
	req := cl.raw.Patch(types.ApplyPatchType).AbsPath(resourcePath(gvr, namespace, name)).
		Param("fieldManager", FieldManager).Param("force", "true").Body(body)
	if dryRun {
		req = req.Param("dryRun", "All")
	}
	res := req.Do(ctx)
	var code int
	res.StatusCode(&code)
	if err := res.Error(); err != nil {
		return nil, false, err // Error decodes the server's Status
	}
	live, err = res.Raw()
	return live, code == http.StatusCreated, err
}

// exists reports whether the identity sees the object (false with an error
// when it may not look).
func (cl *clients) exists(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (bool, error) {
	err := cl.raw.Get().AbsPath(resourcePath(gvr, namespace, name)).Do(ctx).Error()
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}
