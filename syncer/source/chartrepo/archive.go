package chartrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"

	"deputy.dev/deputy/syncer/source/limit"
)

// sha256Hex is a sha256 digest in lower-case hex.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// archive returns r's archive: from the cache of s's repository when a
// file there has the announced digest (re-verified on every read: a file
// placed there with other content is not trusted, and is replaced), else
// downloaded, checked against the digest and cached (written to a
// temporary file, then renamed). An index without a digest gets its
// archive downloaded every time, and not cached.
func (f *Fetcher) archive(ctx context.Context, s Source, cred *Credential, r *located) ([]byte, error) {
	if r.digest != "" && !sha256Hex.MatchString(r.digest) {
		return nil, fmt.Errorf("the announced digest %q is not a sha256 digest: fix the repository", r.digest)
	}
	cached := ""
	if f.CacheDir != "" && r.digest != "" {
		cached = cachePath(f.CacheDir, s.RepoURL, cred, r.digest)
		if data, ok := readCached(cached, r.digest, f.Limits.MaxFetchBytes); ok {
			return data, nil
		}
	}
	data, err := r.download(ctx)
	if err != nil {
		return nil, err
	}
	if r.digest != "" {
		if got := digestOf(data); got != r.digest {
			return nil, fmt.Errorf("the archive's sha256 is %s but the repository announces %s: the archive or the index was changed (or the download was tampered with); deputy renders nothing from it: fix the repository", got, r.digest)
		}
	}
	if cached != "" {
		// A cache that cannot be written costs a download next time, no more.
		_ = writeAtomic(cached, data)
	}
	return data, nil
}

// cachePath is where the archive of digest from repoURL, fetched with
// cred, is cached: DIR/REPO/sha256-DIGEST.tgz, REPO a hash of the exact
// repository URL and of the credential's configuration entry and username
// (never its password). A digest is no secret: were the cache keyed by the
// digest alone, any repository announcing the digest of a private chart
// another repository's credential downloaded would be handed that chart.
// Archives are shared only among fetches of the same repository with the
// same credential, which could download them anyway.
func cachePath(dir, repoURL string, cred *Credential, digest string) string {
	key := "repo\x00" + repoURL
	if cred != nil {
		key += "\x00credential\x00" + cred.ConfigURL + "\x00" + cred.Username
	}
	return filepath.Join(dir, digestOf([]byte(key)), "sha256-"+digest+".tgz")
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// readCached returns the cached archive when its content has the digest.
func readCached(name, digest string, max int64) ([]byte, bool) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, false
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil || int64(len(data)) > max || digestOf(data) != digest {
		return nil, false
	}
	return data, true
}

// writeAtomic writes data to name through a temporary file in the same
// directory, renamed into place.
func writeAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// unpack reads a chart archive within the limits, then loads its files with
// Helm's loader (loader.LoadArchiveFiles: its path checks, and its size
// limits set to deputy's). deputy reads the tar headers first itself
// because Helm's limits fail with plain strings: this pass turns an entry
// over MaxFileBytes, a total over MaxRenderBytes or more than MaxFiles
// entries into a *limit.Error, and an entry whose path leaves the chart
// into an error naming it, before Helm unpacks anything.
//
// It returns the files and the archive's unpacked size and entry count.
func unpack(data []byte, l Limits) ([]*loader.BufferedFile, int64, int, error) {
	size, entries, err := scanArchive(data, l)
	if err != nil {
		return nil, 0, 0, err
	}
	// The render worker unpacks one chart at a time: Helm's limits are
	// package variables.
	loader.MaxDecompressedFileSize = l.MaxFileBytes
	loader.MaxDecompressedChartSize = l.MaxRenderBytes
	files, err := loader.LoadArchiveFiles(bytes.NewReader(data))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("the chart archive is not a valid chart: %w: fix the chart", err)
	}
	return files, size, entries, nil
}

// charge counts a chart's unpacked size and entries against the render's
// limits: a render's chart and its dependencies count together, so that a
// chart naming many dependencies, each within the limits, does not
// multiply them.
func (f *Fetcher) charge(size int64, entries int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unpackedBytes += size
	f.unpackedFiles += entries
	switch {
	case f.unpackedBytes > f.Limits.MaxRenderBytes:
		return &limit.Error{Field: limit.FieldMaxRenderBytes, What: fmt.Sprintf("the charts of this render unpacked (the chart and the dependencies fetched so far: %s)", limit.Bytes(f.unpackedBytes)), Limit: limit.Bytes(f.Limits.MaxRenderBytes)}
	case f.unpackedFiles > f.Limits.MaxFiles:
		return &limit.Error{Field: limit.FieldMaxFiles, What: fmt.Sprintf("the charts of this render unpacked (the chart and the dependencies fetched so far: %d entries)", f.unpackedFiles), Limit: fmt.Sprint(f.Limits.MaxFiles)}
	}
	return nil
}

// scanArchive checks every entry of a gzipped tar against the limits and
// refuses paths outside the chart's directory. It returns the archive's
// unpacked size and entry count.
func scanArchive(data []byte, l Limits) (total int64, files int, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, 0, fmt.Errorf("the chart archive is not gzipped: %w: a chart is a .tgz (helm package)", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return total, files, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("the chart archive is not a valid tar: %w", err)
		}
		name := strings.ReplaceAll(hd.Name, `\`, "/")
		if c := path.Clean(name); path.IsAbs(name) || c == ".." || strings.HasPrefix(c, "../") || strings.Contains("/"+name+"/", "/../") {
			return 0, 0, fmt.Errorf("the chart archive's entry %q leaves the chart's directory: deputy unpacks nothing from it", hd.Name)
		}
		// Every entry counts (a stream of directory entries costs time).
		files++
		if files > l.MaxFiles {
			return 0, 0, &limit.Error{Field: limit.FieldMaxFiles, What: fmt.Sprintf("the chart archive's entry count (entry %q, entry %d)", hd.Name, files), Limit: fmt.Sprint(l.MaxFiles)}
		}
		// Every entry with data counts, whatever its type: tar readers (and
		// Helm's loader) read a contiguous file, a sparse file or a device
		// entry's data as a file's.
		if hd.Size == 0 || hd.FileInfo().IsDir() {
			continue
		}
		if hd.Size > l.MaxFileBytes {
			return 0, 0, &limit.Error{Field: limit.FieldMaxFileBytes, What: fmt.Sprintf("the chart archive's file %q (%s unpacked)", hd.Name, limit.Bytes(hd.Size)), Limit: limit.Bytes(l.MaxFileBytes)}
		}
		if total += hd.Size; total > l.MaxRenderBytes {
			return 0, 0, &limit.Error{Field: limit.FieldMaxRenderBytes, What: fmt.Sprintf("the chart archive unpacked (more than %s with %q)", limit.Bytes(total), hd.Name), Limit: limit.Bytes(l.MaxRenderBytes)}
		}
		// tar's reader returns at most the declared size: reading it
		// checks the stream without keeping it.
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return 0, 0, fmt.Errorf("the chart archive's entry %q: %w", hd.Name, err)
		}
	}
}
