package helm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/ignore"
)

// maxDependencyDepth bounds how deep file:// dependencies may nest (a
// chart that names itself would otherwise never end).
const maxDependencyDepth = 10

// loadChart loads the chart in dir (repository-relative) as `helm
// dependency build` then `helm template` would: its files (minus
// .helmignore's), its vendored charts/ (directories and archives), and each
// Chart.yaml dependency with a file:// repository that charts/ lacks,
// loaded from that directory of the repository. Remote dependencies must
// be vendored: Render reports those missing.
func loadChart(files Files, dir string, depth int, lo loadOptions) (*chart.Chart, error) {
	if depth > maxDependencyDepth {
		return nil, fmt.Errorf("chart %s: file:// dependencies nest more than %d deep: check for a dependency cycle", displayDir(dir), maxDependencyDepth)
	}
	if _, err := files.ReadFile(path.Join(dir, "Chart.yaml")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s holds no Chart.yaml: fix the path to the chart", displayDir(dir))
		}
		return nil, err
	}
	rules := ignore.Empty()
	if lo.packaged {
		// A packaged chart was filtered by .helmignore when it was packaged;
		// Helm loads an archive's files as they are.
	} else if data, err := files.ReadFile(path.Join(dir, ignore.HelmIgnore)); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("chart %s: %s: %w", displayDir(dir), ignore.HelmIgnore, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if !lo.packaged {
		rules.AddDefaults()
	}
	var bufs []*loader.BufferedFile
	if err := walk(files, dir, "", rules, &bufs); err != nil {
		return nil, err
	}
	ch, err := loader.LoadFiles(bufs)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w: fix the chart", displayDir(dir), err)
	}
	if err := addFileDependencies(files, dir, ch, depth, lo); err != nil {
		return nil, err
	}
	return ch, nil
}

// walk appends the files below dir/rel that rules keep.
func walk(files Files, dir, rel string, rules *ignore.Rules, out *[]*loader.BufferedFile) error {
	names, err := files.ReadDir(path.Join(dir, rel))
	if err != nil {
		return err
	}
	for _, name := range names {
		n := path.Join(rel, name)
		isDir := files.IsDir(path.Join(dir, n))
		if rules.Ignore(n, fileInfo{name: name, dir: isDir}) {
			continue
		}
		if isDir {
			if err := walk(files, dir, n, rules, out); err != nil {
				return err
			}
			continue
		}
		data, err := files.ReadFile(path.Join(dir, n))
		if err != nil {
			return err
		}
		*out = append(*out, &loader.BufferedFile{Name: n, Data: bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))})
	}
	return nil
}

// loadOptions say where a chart comes from.
type loadOptions struct {
	// packaged: the chart comes from an archive (a Helm repository or an
	// OCI registry), not a directory in Git: no .helmignore, no file://.
	packaged bool
	// label names the top chart in messages ("" : its directory).
	label string
	// remote fetches a remote dependency of the top chart (nil: refused
	// as missing).
	remote DependencyFunc
}

// addFileDependencies loads each dependency of ch that charts/ does not
// hold: a file:// one from its directory, which must be inside the
// repository (refused for a packaged chart), a remote one of the top chart
// through lo.remote (as `helm dependency build` fetches the top chart's
// dependencies only).
func addFileDependencies(files Files, dir string, ch *chart.Chart, depth int, lo loadOptions) error {
	have := map[string]bool{}
	for _, d := range ch.Dependencies() {
		have[d.Name()] = true
	}
	for _, d := range ch.Metadata.Dependencies {
		if have[d.Name] {
			continue
		}
		owner := "chart " + displayDir(dir)
		if depth == 0 && lo.label != "" {
			owner = lo.label
		}
		rest, ok := strings.CutPrefix(d.Repository, "file://")
		if !ok || lo.packaged {
			if lo.remote == nil || depth > 0 {
				continue // CheckDependencies reports it missing
			}
			dep, err := loadRemote(owner, d, lo.remote)
			if err != nil {
				return err
			}
			ch.AddDependency(dep)
			have[d.Name] = true
			continue
		}
		where := fmt.Sprintf("%s: Chart.yaml dependency %s (repository %s)", owner, d.Name, d.Repository)
		if strings.HasPrefix(rest, "/") {
			return fmt.Errorf("%s: an absolute path is outside the repository: use a path relative to the chart, e.g. file://../%s", where, d.Name)
		}
		sub, err := resolvePath(dir, rest)
		if err != nil {
			return fmt.Errorf("%s: %w: vendor it under charts/ instead", where, err)
		}
		if !files.IsDir(sub) {
			return fmt.Errorf("%s: %s is not a directory in the repository: fix the repository path or vendor the chart under charts/", where, displayDir(sub))
		}
		dep, err := loadChart(files, sub, depth+1, loadOptions{remote: lo.remote})
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if dep.Name() != d.Name {
			return fmt.Errorf("%s: the chart there is named %s: name the dependency as its Chart.yaml does", where, dep.Name())
		}
		ch.AddDependency(dep)
		have[d.Name] = true
	}
	return nil
}

// loadRemote loads a remote dependency of the chart owner through fetch.
func loadRemote(owner string, d *chart.Dependency, fetch DependencyFunc) (*chart.Chart, error) {
	files, err := fetch(owner, d)
	if err != nil {
		return nil, err
	}
	dep, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("%s: Chart.yaml dependency %s (repository %s): %w: fix the dependency's chart", owner, d.Name, d.Repository, err)
	}
	if dep.Name() != d.Name {
		return nil, fmt.Errorf("%s: Chart.yaml dependency %s (repository %s): the repository's chart is named %s: name the dependency as its Chart.yaml does", owner, d.Name, d.Repository, dep.Name())
	}
	return dep, nil
}

// fileInfo is what ignore.Rules reads of a file: its name and whether it
// is a directory.
type fileInfo struct {
	name string
	dir  bool
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return 0 }
func (i fileInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }
