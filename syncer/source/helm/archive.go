package helm

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// archiveFS is a chart archive's files as Files: the chart's directory is
// the root. Reads cost nothing more: the archive was unpacked within the
// render's limits.
type archiveFS struct {
	files map[string][]byte
	dirs  map[string][]string
}

// archiveFiles makes Files of an archive's files (loader.LoadArchiveFiles:
// paths relative to the chart's directory, cleaned).
func archiveFiles(bufs []*loader.BufferedFile) *archiveFS {
	m := &archiveFS{files: map[string][]byte{}, dirs: map[string][]string{"": nil}}
	seen := map[string]bool{}
	for _, b := range bufs {
		name := path.Clean(b.Name)
		m.files[name] = b.Data
		// Each directory above the file lists its child once.
		for child := name; child != "." && !seen[child]; child = path.Dir(child) {
			seen[child] = true
			parent := path.Dir(child)
			if parent == "." {
				parent = ""
			}
			m.dirs[parent] = append(m.dirs[parent], path.Base(child))
		}
	}
	for _, names := range m.dirs {
		sort.Strings(names)
	}
	return m
}

func (m *archiveFS) ReadFile(p string) ([]byte, error) {
	if d, ok := m.files[path.Clean(p)]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}

func (m *archiveFS) ReadDir(p string) ([]string, error) {
	p = strings.Trim(path.Clean("/"+p), "/")
	names, ok := m.dirs[p]
	if !ok {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return names, nil
}

func (m *archiveFS) IsDir(p string) bool {
	_, ok := m.dirs[strings.Trim(path.Clean("/"+p), "/")]
	return ok
}
