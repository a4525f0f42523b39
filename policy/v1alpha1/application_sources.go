package v1alpha1

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// refName is Argo CD's rule for spec.sources[].ref (GetRefSources).
var refName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// HasMultipleSources reports whether the Application uses spec.sources
// (Argo CD's ApplicationSpec.HasMultipleSources).
func (s *ApplicationSpec) HasMultipleSources() bool { return len(s.Sources) > 0 }

// GetSources returns the sources a sync renders, in order: spec.sources,
// or spec.source alone.
func (s *ApplicationSpec) GetSources() []ApplicationSource {
	if s.HasMultipleSources() {
		return s.Sources
	}
	return []ApplicationSource{s.Source}
}

// SourcePath is the field path of source i of GetSources: spec.sources[i],
// or spec.source.
func (s *ApplicationSpec) SourcePath(i int) *field.Path {
	if s.HasMultipleSources() {
		return field.NewPath("spec", "sources").Index(i)
	}
	return field.NewPath("spec", "source")
}

// Refs returns the ref names of spec.sources, in order.
func (s *ApplicationSpec) Refs() []string {
	var out []string
	for _, src := range s.Sources {
		if src.Ref != "" {
			out = append(out, src.Ref)
		}
	}
	return out
}

// RefOf returns the ref name of a "$REF/path" value file and the path, and
// false for any other path.
func RefOf(valueFile string) (ref, rest string, ok bool) {
	after, found := strings.CutPrefix(valueFile, "$")
	if !found {
		return "", "", false
	}
	ref, rest, _ = strings.Cut(after, "/")
	return ref, rest, true
}

// UsedRefs returns the refs the source's Helm value files and file
// parameters name ($REF/path), each once, in order of first use.
func (src *ApplicationSource) UsedRefs() []string {
	if src.Helm == nil {
		return nil
	}
	var out []string
	paths := slices.Clone(src.Helm.ValueFiles)
	for _, fp := range src.Helm.FileParameters {
		paths = append(paths, fp.Path)
	}
	for _, p := range paths {
		if ref, _, ok := RefOf(p); ok && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// Renders reports whether the source renders objects itself: every source
// but one of spec.sources with Ref and neither Path nor Chart, which only
// lends its files (Argo CD).
func (src *ApplicationSource) Renders() bool {
	return src.Ref == "" || src.Path != "" || src.Chart != ""
}

// checkRefPath returns why a "$REF/path" cannot name a file of the
// referenced source's repository, "" when it can.
func checkRefPath(p string) string {
	ref, rest, _ := RefOf(p)
	clean := path.Clean("/" + rest)
	switch {
	case !refName.MatchString(ref):
		return "a reference to another source is $REF/path with REF the ref of one of spec.sources (letters, digits, '_' and '-')"
	case strings.TrimSpace(rest) == "" || clean == "/":
		return fmt.Sprintf("give a file after $%s/: the path is from the root of the repository of the source whose ref is %s", ref, ref)
	case strings.Contains(rest, "$"):
		return noEnvsubst
	case strings.Contains(rest, "://"):
		return "URLs are not supported: commit the file to the referenced repository and give its path"
	case hasDotDot(rest):
		return fmt.Sprintf("the path after $%s/ must stay inside that source's repository: remove the ..", ref)
	}
	return ""
}

// hasDotDot reports whether a slash-separated path has a ".." segment.
func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(strings.ReplaceAll(p, "\\", "/"), "/"), "..")
}

// ValidateSources checks spec.source or spec.sources without reading
// anything: every error, each naming its field (spec.sources[2].ref) and
// the fix. Both set is refused (Argo CD silently ignores spec.source, so a
// reader would believe it syncs). In spec.sources each source needs a
// repoURL and a path, a chart or a ref (Argo CD's rule; path "." is the
// repository's root); a ref is a unique name of letters, digits, '_' and
// '-', not with chart; every $REF of a Helm value file or file parameter
// must name a ref of spec.sources. spec.source keeps its rules: a repoURL,
// and no $REF (it needs spec.sources).
func (s *ApplicationSpec) ValidateSources() field.ErrorList {
	var errs field.ErrorList
	if s.HasMultipleSources() && !isZeroSource(s.Source) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "source"), "spec.source and spec.sources are both set: move spec.source into spec.sources (or remove it); Argo CD would silently ignore spec.source, deputy refuses"))
	}
	refs := s.Refs()
	seen := map[string]int{}
	for i, src := range s.GetSources() {
		p := s.SourcePath(i)
		errs = append(errs, validateSource(src, p, s.HasMultipleSources())...)
		if src.Ref != "" {
			switch {
			case !s.HasMultipleSources():
				errs = append(errs, field.Invalid(p.Child("ref"), src.Ref, "ref names a source of spec.sources: move this source into spec.sources or remove ref"))
			case !refName.MatchString(src.Ref):
				errs = append(errs, field.Invalid(p.Child("ref"), src.Ref, "a ref may hold only letters, digits, '_' and '-' (Argo CD's rule): rename it, and the $REF/ value files that use it"))
			case src.Chart != "":
				errs = append(errs, field.Invalid(p.Child("ref"), src.Ref, "a source with ref cannot have chart (Argo CD reads value files from Git sources only): remove chart, or move ref to a Git source"))
			}
			if j, dup := seen[src.Ref]; dup {
				errs = append(errs, field.Duplicate(p.Child("ref"), fmt.Sprintf("%s (also spec.sources[%d].ref): give each source its own ref", src.Ref, j)))
			}
			seen[src.Ref] = i
		}
		errs = append(errs, validateRefUses(src, p, refs, s.HasMultipleSources())...)
	}
	return errs
}

// validateSource checks one source's repoURL, path and helm.
func validateSource(src ApplicationSource, p *field.Path, multiple bool) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(src.RepoURL) == "" {
		errs = append(errs, field.Required(p.Child("repoURL"), "set the Git repository to sync from (https://..., file://... or a local path)"))
	}
	if multiple && src.Path == "" && src.Chart == "" && src.Ref == "" {
		errs = append(errs, field.Required(p.Child("path"), "each of spec.sources needs a path (\".\" for the repository's root), a chart or a ref (Argo CD's rule)"))
	}
	if sp := src.Path; sp != "" {
		clean := path.Clean(strings.ReplaceAll(sp, "\\", "/"))
		switch {
		case path.IsAbs(clean):
			errs = append(errs, field.Invalid(p.Child("path"), sp, "must be relative to the repository root (e.g. guestbook), not absolute"))
		case clean == ".." || strings.HasPrefix(clean, "../"):
			errs = append(errs, field.Invalid(p.Child("path"), sp, "must stay inside the repository: remove the leading .."))
		}
	}
	return append(errs, src.Helm.Validate(p.Child("helm"))...)
}

// validateRefUses checks that every $REF a source's Helm files name is a
// ref of spec.sources.
func validateRefUses(src ApplicationSource, p *field.Path, refs []string, multiple bool) field.ErrorList {
	if src.Helm == nil {
		return nil
	}
	var errs field.ErrorList
	check := func(fp *field.Path, file string) {
		ref, _, ok := RefOf(file)
		switch {
		case !ok || checkRefPath(file) != "":
			// Not a reference, or one HelmSource.Validate reports.
		case !multiple:
			errs = append(errs, field.Invalid(fp, file, "$REF/path reads from another source, which needs spec.sources: move this source and the referenced repository (with ref: "+ref+") into spec.sources"))
		case !slices.Contains(refs, ref):
			errs = append(errs, field.Invalid(fp, file, fmt.Sprintf("no source of spec.sources has ref %q (refs: %s): fix the value file or set ref on the source it reads from", ref, refList(refs))))
		}
	}
	for i, f := range src.Helm.ValueFiles {
		check(p.Child("helm", "valueFiles").Index(i), f)
	}
	for i, f := range src.Helm.FileParameters {
		check(p.Child("helm", "fileParameters").Index(i).Child("path"), f.Path)
	}
	return errs
}

// refList is the refs for a message: "values, config", or "none".
func refList(refs []string) string {
	if len(refs) == 0 {
		return "none"
	}
	return strings.Join(refs, ", ")
}

// isZeroSource reports whether spec.source is unset.
func isZeroSource(s ApplicationSource) bool {
	return s.RepoURL == "" && s.Path == "" && s.TargetRevision == "" && s.Chart == "" && s.Helm == nil && s.Ref == ""
}

// RevisionList returns the synced revisions, one per source: Revisions
// (spec.sources), else Revision alone, else nil.
func (s *SyncStatus) RevisionList() []string {
	return revisionList(s.Revision, s.Revisions)
}

// RevisionList returns the rendered revisions, one per source: Revisions
// (spec.sources), else Revision alone, else nil.
func (r *SyncOperationResult) RevisionList() []string {
	if r == nil {
		return nil
	}
	return revisionList(r.Revision, r.Revisions)
}

func revisionList(one string, many []string) []string {
	switch {
	case len(many) > 0:
		return many
	case one != "":
		return []string{one}
	}
	return nil
}
