package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

// RenderedApplication is what an Application renders to.
type RenderedApplication struct {
	// Revisions are the commits the sources were read at, one per source
	// of spec.sources in order (one for spec.source); a source whose
	// revision was not resolved yet when an error ended the render is "".
	Revisions []string
	// Objects are the objects of every source, concatenated in source
	// order (each source's own order within).
	Objects []*unstructured.Unstructured
}

// RenderApplication turns an Application into the objects a sync applies:
// the one function the sync engine and `deputy render` both use. With
// spec.source it renders that source (Cache.Render) at
// sync.Revision, else its targetRevision. With spec.sources it checks them
// (ApplicationSpec.ValidateSources), resolves every source's revision first
// (sync.Revisions[i], else its targetRevision) so that a ref source read by
// several renders is read at one commit, then renders each source that
// renders (a ref source without path only lends files), each in its own
// render worker, with the ref sources its $REF/path files name and what
// the earlier renders left of sync.limits.maxObjects and maxRenderBytes
// (WithUsed: the sources together stay within them, however many
// there are); the objects are concatenated in source order.
//
// Helm sources get Argo CD's defaults: the release is named after the
// Application and installed in the destination namespace. opts are passed
// to every source's render.
//
// It checks no project: the sync engine checks every source against the
// AppProject before calling it. The returned value carries
// the revisions resolved so far even with an error.
//
// Errors: a source that does not render (naming spec.sources[i], its
// repository and path), sync.Revision on spec.sources or sync.Revisions
// not one per source, an object rendered by two sources (naming both), or
// the sources together over sync.limits.maxObjects or maxRenderBytes
// (*LimitError).
func RenderApplication(ctx context.Context, sources *Cache, app *v1alpha1.Application, sync v1alpha1.SyncOperation, opts ...RenderOption) (*RenderedApplication, error) {
	spec := &app.Spec
	if !spec.HasMultipleSources() {
		if len(sync.Revisions) > 0 {
			return nil, errors.New("operation.sync.revisions is for spec.sources: this Application has spec.source, give operation.sync.revision (deputy sync --revision)")
		}
		r, err := sources.Render(ctx, HelmDefaults(app, spec.Source), sync.Revision, opts...)
		if r == nil {
			return nil, err
		}
		return &RenderedApplication{Revisions: []string{r.Revision}, Objects: r.Objects}, err
	}
	if err := spec.ValidateSources().ToAggregate(); err != nil {
		return nil, fmt.Errorf("%w: fix the Application", err)
	}
	n := len(spec.Sources)
	switch {
	case sync.Revision != "":
		return nil, fmt.Errorf("operation.sync.revision %q names one revision, but this Application has %d sources (spec.sources): give operation.sync.revisions, one per source in order (\"\" keeps a source's targetRevision), or sync without a revision", sync.Revision, n)
	case len(sync.Revisions) > 0 && len(sync.Revisions) != n:
		return nil, fmt.Errorf("operation.sync.revisions has %d revisions, but this Application has %d sources (spec.sources): give one per source in order (\"\" keeps a source's targetRevision)", len(sync.Revisions), n)
	}
	out := &RenderedApplication{Revisions: make([]string, n)}
	for i, src := range spec.Sources {
		if len(sync.Revisions) > 0 && sync.Revisions[i] != "" {
			src.TargetRevision = sync.Revisions[i]
		}
		sha, err := sources.ResolveRevision(ctx, src)
		if err != nil {
			return out, fmt.Errorf("%s: %w", DescribeSource(spec, i), err)
		}
		out.Revisions[i] = sha
	}
	refs := map[string]Ref{}
	for i, src := range spec.Sources {
		if src.Ref != "" {
			refs[src.Ref] = Ref{Name: src.Ref, RepoURL: src.RepoURL, Revision: out.Revisions[i]}
		}
	}
	from := map[objectID]int{}
	var bytes int64
	for i, src := range spec.Sources {
		if !src.Renders() {
			continue
		}
		var used []Ref
		for _, name := range src.UsedRefs() {
			used = append(used, refs[name])
		}
		// Each render gets what the earlier ones left of the limits.
		r, err := sources.Render(ctx, HelmDefaults(app, src), out.Revisions[i],
			append(slices.Clip(opts), WithRefs(used...), WithUsed(len(out.Objects), bytes))...)
		if err != nil {
			return out, fmt.Errorf("%s: %w", DescribeSource(spec, i), err)
		}
		for _, o := range r.Objects {
			id := idOf(o, app.Spec.Destination.Namespace)
			if j, dup := from[id]; dup {
				return out, fmt.Errorf("%s is rendered by %s and by %s: an object may come from one source only (Argo CD warns and keeps the last); remove it from one of them", id, DescribeSource(spec, j), DescribeSource(spec, i))
			}
			from[id] = i
		}
		out.Objects = append(out.Objects, r.Objects...)
		bytes += r.Bytes
	}
	return out, nil
}

// HelmDefaults is src with Argo CD's Helm defaults filled in: the
// release is named after the Application and installed in the
// destination's namespace (used only when the path holds a chart).
func HelmDefaults(app *v1alpha1.Application, src v1alpha1.ApplicationSource) v1alpha1.ApplicationSource {
	h := src.Helm.DeepCopy()
	if h == nil {
		h = &v1alpha1.HelmSource{}
	}
	h.ReleaseName = cmp.Or(h.ReleaseName, app.Name)
	h.Namespace = cmp.Or(h.Namespace, app.Spec.Destination.Namespace)
	src.Helm = h
	return src
}

// DescribeSource names source i of spec in errors: "spec.sources[1] (REPO, path
// P)", or "spec.source" alone.
func DescribeSource(spec *v1alpha1.ApplicationSpec, i int) string {
	if !spec.HasMultipleSources() {
		return "spec.source"
	}
	src := spec.Sources[i]
	where := src.RepoURL
	switch {
	case src.Chart != "":
		where += ", chart " + src.Chart
	case src.Path != "":
		where += ", path " + src.Path
	}
	if src.Ref != "" {
		where += ", ref " + src.Ref
	}
	return fmt.Sprintf("%s (%s)", spec.SourcePath(i), where)
}

// objectID identifies an object across sources: group, kind, namespace
// (the destination's when the object names none) and name.
type objectID struct{ group, kind, namespace, name string }

func idOf(o *unstructured.Unstructured, destNamespace string) objectID {
	gvk := o.GroupVersionKind()
	return objectID{gvk.Group, gvk.Kind, cmp.Or(o.GetNamespace(), destNamespace), o.GetName()}
}

func (id objectID) String() string {
	kind := id.kind
	if id.group != "" {
		kind += "." + id.group
	}
	if id.namespace == "" {
		return kind + " " + id.name
	}
	return kind + " " + id.namespace + "/" + id.name
}
