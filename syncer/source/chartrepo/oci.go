package chartrepo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/Masterminds/semver/v3"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"deputy.dev/deputy/syncer/source/limit"
)

// locateOCI resolves s in an OCI registry: the repository HOST/PATH/CHART
// of oci://HOST/PATH, the version a tag (Helm writes a version's '+' as
// '_'). oras-go's remote.Repository (the library under Helm's
// registry.Client) is used directly because Helm's Client.Pull always
// downloads the chart layer, unbounded: deputy reads the manifest first,
// takes the layer from the cache when its digest is there, and downloads
// it within MaxFetchBytes otherwise.
func (f *Fetcher) locateOCI(ctx context.Context, s Source, u *url.URL, cred *Credential) (*located, error) {
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%s: spec.source.repoURL must be oci://HOST/PATH (no user info, query or fragment)", s)
	}
	ref := u.Host + strings.TrimSuffix(u.Path, "/") + "/" + s.Chart
	repo, err := remote.NewRepository(ref)
	if err != nil {
		return nil, fmt.Errorf("%s: %s is not an OCI repository reference: %w: fix spec.source.repoURL or spec.source.chart", s, ref, err)
	}
	client, t := newClient(f.Transport, nil, credScope{}, true, f.Limits.MaxFetchBytes)
	ac := &auth.Client{Client: client, Cache: auth.NewCache()}
	if cred != nil {
		// oras answers the registry's challenge (basic, or a token from the
		// realm it names) for this host:port only.
		ac.Credential = auth.StaticCredential(u.Host, auth.Credential{Username: cred.Username, Password: cred.Password})
	}
	repo.Client = ac
	repo.MaxMetadataBytes = min(f.Limits.MaxFetchBytes, 4<<20)
	repo.TagListMaxPages = 100
	fail := func(what string, err error) error {
		if lerr := t.limitErr(); lerr != nil {
			return fmt.Errorf("%s: %w", s, lerr)
		}
		var er *errcode.ErrorResponse
		if errors.As(err, &er) && (er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden) {
			if er.URL != nil && er.URL.Host != u.Host {
				return fmt.Errorf("%s: %s: %s from %s: %s", s, what, http.StatusText(er.StatusCode), redact(er.URL), redirectedHint(u.Host))
			}
			return fmt.Errorf("%s: %s: %s: %s", s, what, http.StatusText(er.StatusCode), credentialHint(cred, s.RepoURL))
		}
		if errors.Is(err, auth.ErrBasicCredentialNotFound) {
			// The registry asked for basic auth deputy has no credential for.
			return fmt.Errorf("%s: %s: the registry asks for a username and password: %s", s, what, credentialHint(cred, s.RepoURL))
		}
		return fmt.Errorf("%s: %s: %w", s, what, err)
	}
	version, err := f.ociVersion(ctx, repo, s)
	var nv *noVersion
	if errors.As(err, &nv) {
		return nil, err
	}
	if err != nil {
		return nil, fail("failed to list the tags of "+ref, err)
	}
	tag := strings.ReplaceAll(version, "+", "_")
	desc, rc, err := repo.FetchReference(ctx, tag)
	if err != nil {
		return nil, fail(fmt.Sprintf("failed to read the manifest of %s:%s", ref, tag), err)
	}
	var m ocispec.Manifest
	err = json.NewDecoder(io.LimitReader(rc, repo.MaxMetadataBytes)).Decode(&m)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: the manifest of %s:%s (%s) is not an OCI image manifest: %w", s, ref, tag, desc.Digest, err)
	}
	var layer *ocispec.Descriptor
	for i, l := range m.Layers {
		if l.MediaType == registry.ChartLayerMediaType || l.MediaType == registry.LegacyChartLayerMediaType {
			layer = &m.Layers[i]
			break
		}
	}
	if layer == nil {
		return nil, fmt.Errorf("%s: %s:%s has no Helm chart layer (%s): it is not a chart pushed with helm push", s, ref, tag, registry.ChartLayerMediaType)
	}
	if layer.Digest.Algorithm() != "sha256" || layer.Digest.Validate() != nil {
		return nil, fmt.Errorf("%s: %s:%s: the chart layer's digest %q is not a sha256 digest", s, ref, tag, layer.Digest)
	}
	if layer.Size > f.Limits.MaxFetchBytes {
		return nil, fmt.Errorf("%s: %w", s, &limit.Error{Field: limit.FieldMaxFetchBytes, What: fmt.Sprintf("the chart layer of %s:%s (%s)", ref, tag, limit.Bytes(layer.Size)), Limit: limit.Bytes(f.Limits.MaxFetchBytes)})
	}
	l := *layer
	return &located{version: version, digest: l.Digest.Encoded(), download: func(ctx context.Context) ([]byte, error) {
		rc, err := repo.Blobs().Fetch(ctx, l)
		if err != nil {
			return nil, fail("failed to download the chart layer "+l.Digest.String(), err)
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, l.Size+1))
		if err != nil {
			return nil, fail("failed to download the chart layer "+l.Digest.String(), err)
		}
		return data, nil
	}}, nil
}

// ociVersion resolves s.Version against the repository's tags as Helm
// does for OCI charts: an exact version is taken as it is; a constraint
// (or "": the newest stable) picks the newest tag that satisfies it.
func (f *Fetcher) ociVersion(ctx context.Context, repo *remote.Repository, s Source) (string, error) {
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(s.Version, "v")); err == nil && s.Version != "" {
		return s.Version, nil
	}
	c, err := semver.NewConstraint(cmp.Or(s.Version, "*"))
	if err != nil {
		return "", err
	}
	var tags []string
	err = repo.Tags(ctx, "", func(page []string) error {
		for _, t := range page {
			tags = append(tags, strings.ReplaceAll(t, "_", "+"))
		}
		if len(tags) > 100000 {
			return errors.New("the repository lists more than 100000 tags")
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, v := range sortVersions(tags) {
		if sv, err := semver.NewVersion(v); err == nil && c.Check(sv) {
			return v, nil
		}
	}
	return "", noVersionError(s, tags)
}
