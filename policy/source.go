package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Status reports the state of a Source for readiness and logs.
type Status struct {
	// Loaded is true once a snapshot has been loaded.
	Loaded bool
	// LastError is the error of the most recent load attempt, nil when it
	// succeeded. While it is set the previous snapshot keeps serving.
	LastError error
	// LastAttempt and LastSuccess are the times of the last load attempt and
	// the last successful load.
	LastAttempt time.Time
	LastSuccess time.Time
	// Files and Digest describe the serving snapshot.
	Files  int
	Digest string
}

// Ready reports whether the source serves a snapshot and its last load
// succeeded.
func (s Status) Ready() bool { return s.Loaded && s.LastError == nil }

// FileSource loads policy from files and directories and reloads it when they
// change (fsnotify on each directory, plus a poll as a safety net for
// filesystems without inotify). A failed reload keeps the last good snapshot.
// Safe for concurrent use.
type FileSource struct {
	paths        []string
	fsys         fs.FS // when set, paths are read from this FS (embedded policy)
	pollInterval time.Duration
	log          *slog.Logger
	onLoad       func(Status)

	current atomic.Pointer[Snapshot]
	status  atomic.Pointer[Status]

	mu        sync.Mutex // serialises reloads and guards listeners
	listeners []func(*Snapshot)
}

// FileSourceOptions configure a FileSource.
type FileSourceOptions struct {
	// PollInterval re-reads the files this often even without an fsnotify
	// event; 0 disables polling.
	PollInterval time.Duration
	// FS, when set, is read instead of the OS filesystem (paths are then
	// fs.FS paths); used for the embedded example policy. Such sources are not
	// watched.
	FS     fs.FS
	Logger *slog.Logger
	// OnLoad, if set, is called after every load attempt with the resulting
	// status (for metrics).
	OnLoad func(Status)
}

// NewFileSource returns a source over paths (files or directories; a
// directory contributes its *.yaml, *.yml, *.json and *.csv files, not
// recursively, skipping names starting with "."). Call Load or Run to load it.
func NewFileSource(paths []string, opts FileSourceOptions) *FileSource {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &FileSource{paths: slices.Clone(paths), fsys: opts.FS, pollInterval: opts.PollInterval, log: log, onLoad: opts.OnLoad}
	s.status.Store(&Status{})
	return s
}

// Current returns the serving snapshot, or nil before the first successful load.
func (s *FileSource) Current() *Snapshot { return s.current.Load() }

// Status returns the source's current status.
func (s *FileSource) Status() Status { return *s.status.Load() }

// OnChange registers f to be called (synchronously, under the reload lock)
// after every swap to a new snapshot.
func (s *FileSource) OnChange(f func(*Snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, f)
}

// Load reads every file once and swaps in the new snapshot when it loads and
// differs from the serving one.
//
// Errors: unreadable or missing paths, and every decode/validation problem
// (see Decode); the serving snapshot is kept in that case.
func (s *FileSource) Load() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onLoad != nil {
		defer func() { s.onLoad(*s.status.Load()) }()
	}
	now := time.Now()
	prev := s.status.Load()
	files, err := s.gather()
	var snap *Snapshot
	if err == nil {
		cur := s.current.Load()
		if cur != nil && cur.Digest == digest(files) {
			st := *prev
			st.LastError, st.LastAttempt, st.LastSuccess = nil, now, now
			s.status.Store(&st)
			return nil
		}
		snap, err = Load(files)
	}
	if err != nil {
		st := *prev
		st.LastError, st.LastAttempt = err, now
		s.status.Store(&st)
		s.log.Error("policy load failed; keeping the last good policy", "error", err.Error(), "serving", prev.Loaded)
		return err
	}
	s.current.Store(snap)
	s.status.Store(&Status{Loaded: true, LastAttempt: now, LastSuccess: now, Files: len(snap.Files), Digest: snap.Digest})
	roles, clusterRoles, rbs, crbs := snap.RBAC.Counts()
	s.log.Info("policy loaded", "files", len(snap.Files), "roles", roles, "clusterRoles", clusterRoles,
		"roleBindings", rbs, "clusterRoleBindings", crbs, "appProjects", len(snap.Projects), "applications", len(snap.Applications), "tokens", snap.Tokens.Len())
	for _, f := range s.listeners {
		f(snap)
	}
	return nil
}

// gather reads the files behind s.paths in a stable order.
func (s *FileSource) gather() ([]SourceFile, error) {
	var files []SourceFile
	var errs []error
	for _, p := range s.paths {
		fi, err := s.stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy path %s: %w (check --policy)", p, err))
			continue
		}
		if !fi.IsDir() {
			if FileFormat(p) == "" {
				errs = append(errs, fmt.Errorf("policy file %s: unsupported file type: use .yaml, .yml, .json (objects) or .csv (tokens)", p))
				continue
			}
			data, err := s.readFile(p)
			if err != nil {
				errs = append(errs, fmt.Errorf("policy file %s: %w", p, err))
				continue
			}
			files = append(files, SourceFile{Name: p, Data: data})
			continue
		}
		entries, err := s.readDir(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy directory %s: %w", p, err))
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || FileFormat(name) == "" {
				continue
			}
			full := s.join(p, name)
			// Follow symlinks (ConfigMap volumes are symlinks into ..data).
			fi, err := s.stat(full)
			if err != nil || fi.IsDir() {
				continue
			}
			data, err := s.readFile(full)
			if err != nil {
				errs = append(errs, fmt.Errorf("policy file %s: %w", full, err))
				continue
			}
			files = append(files, SourceFile{Name: full, Data: data})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no policy files (.yaml, .yml, .json, .csv) in %s: check --policy", strings.Join(s.paths, ", "))
	}
	return files, nil
}

func (s *FileSource) stat(p string) (fs.FileInfo, error) {
	if s.fsys != nil {
		return fs.Stat(s.fsys, p)
	}
	return os.Stat(p)
}

func (s *FileSource) readFile(p string) ([]byte, error) {
	if s.fsys != nil {
		return fs.ReadFile(s.fsys, p)
	}
	return os.ReadFile(p)
}

func (s *FileSource) readDir(p string) ([]fs.DirEntry, error) {
	if s.fsys != nil {
		return fs.ReadDir(s.fsys, p)
	}
	return os.ReadDir(p) // sorted by name
}

func (s *FileSource) join(dir, name string) string {
	if s.fsys != nil {
		if dir == "." {
			return name
		}
		return strings.TrimSuffix(dir, "/") + "/" + name
	}
	return filepath.Join(dir, name)
}

// reloadDebounce collapses the burst of events an editor or a ConfigMap
// update produces into one reload.
const reloadDebounce = 100 * time.Millisecond

// Run loads the policy and then reloads it on every change until ctx ends.
// Only a watcher that cannot be started is returned as an error (after the
// load); load errors are reported through Status and logs.
func (s *FileSource) Run(ctx context.Context) error {
	if s.fsys != nil {
		if s.Current() == nil {
			_ = s.Load()
		}
		<-ctx.Done()
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		_ = s.Load()
		return fmt.Errorf("failed to start policy file watcher: %w", err)
	}
	defer w.Close()
	for _, dir := range s.watchDirs() {
		if err := w.Add(dir); err != nil {
			s.log.Error("cannot watch policy directory; relying on polling", "dir", dir, "error", err.Error())
		}
	}
	// Load once the watches are in place, even if a snapshot is already
	// serving (callers Load before Run to fail fast): a change made between
	// that load and the watches would otherwise go unnoticed until the next
	// change or poll. Unchanged files cost a read and a hash.
	_ = s.Load()

	var poll <-chan time.Time
	if s.pollInterval > 0 {
		t := time.NewTicker(s.pollInterval)
		defer t.Stop()
		poll = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
				continue
			}
			debounce.Reset(reloadDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Error("policy watcher error", "error", err.Error())
		case <-debounce.C:
			_ = s.Load()
		case <-poll:
			_ = s.Load()
		}
	}
}

// watchDirs are the directories to watch: each directory path, and the parent
// of each file path (so an atomic rename-over of the file is seen).
func (s *FileSource) watchDirs() []string {
	var dirs []string
	for _, p := range s.paths {
		d := p
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			d = filepath.Dir(p)
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
