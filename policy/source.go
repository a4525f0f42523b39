package policy

import (
	"bytes"
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
//
// Files are loaded only once their content is stable: read, read again a
// settle interval later, and loaded only when both reads agree (see
// FileSourceOptions.SettleInterval), so a file rewritten in place in several
// writes is never loaded half-written. A reload in which a file that held
// objects in the serving snapshot holds none (truncated, emptied, only
// comments) is a load error. Atomic replacement (write a temporary file, then
// rename it over) is the supported way to update policy files.
//
// Safe for concurrent use.
type FileSource struct {
	paths        []string
	fsys         fs.FS // when set, paths are read from this FS (embedded policy)
	pollInterval time.Duration
	settle       time.Duration // 0: no settling (embedded FS, or disabled)
	log          *slog.Logger
	onLoad       func(Status)

	current atomic.Pointer[Snapshot]
	status  atomic.Pointer[Status]

	mu        sync.Mutex // serialises reloads and guards listeners
	listeners []func(*Snapshot)
}

// DefaultSettleInterval is how long a changed policy file must keep the same
// content before it is loaded. Writers that rewrite a file in place (shell
// redirection, editors that save in place, kubectl cp, configuration
// management agents) issue their writes within milliseconds of each other, a
// slow one within a few hundred; 500ms covers them with margin, while a
// reload still takes effect about 0.6s after the last write (100ms event
// debounce, the settle interval, the load). Writes further apart than that
// are separate versions of the file: only atomic replacement makes an update
// safe whatever the writer's pace.
const DefaultSettleInterval = 500 * time.Millisecond

// maxSettleRounds bounds how many settle intervals one load waits for files
// that keep changing before it gives up with an error (about 5s at the
// default interval); the next event or poll tries again.
const maxSettleRounds = 10

// FileSourceOptions configure a FileSource.
type FileSourceOptions struct {
	// PollInterval re-reads the files this often even without an fsnotify
	// event; 0 disables polling.
	PollInterval time.Duration
	// FS, when set, is read instead of the OS filesystem (paths are then
	// fs.FS paths); used for the embedded example policy. Such sources are not
	// watched, and not settled unless SettleInterval is positive (an fs.FS
	// such as embed.FS does not change).
	FS fs.FS
	// SettleInterval is how long changed files must keep their content
	// before they are loaded: each load reads the files, waits this long and
	// reads them again, and loads only content both reads agree on. 0 is
	// DefaultSettleInterval (no settling with FS); a negative value disables
	// settling (tests, and one-shot reads of files known not to change).
	SettleInterval time.Duration
	Logger         *slog.Logger
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
	settle := opts.SettleInterval
	switch {
	case settle < 0 || (settle == 0 && opts.FS != nil):
		settle = 0
	case settle == 0:
		settle = DefaultSettleInterval
	}
	s := &FileSource{paths: slices.Clone(paths), fsys: opts.FS, pollInterval: opts.PollInterval, settle: settle, log: log, onLoad: opts.OnLoad}
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

// Load reads the files and swaps in the new snapshot when it loads and
// differs from the serving one. Content that differs from the serving
// snapshot is loaded only once stable: Load waits the settle interval, reads
// again, and repeats until two consecutive reads agree (at most
// maxSettleRounds times), so it may block for a few settle intervals.
//
// Errors: unreadable or missing paths; files still changing after the last
// settle round (naming one); a file that held objects in the serving
// snapshot and now holds none; and every decode/validation problem (see
// Decode). The serving snapshot is kept in each case, and Status reports the
// error (readiness red).
func (s *FileSource) Load() error {
	return s.load(context.Background())
}

// load is Load, with ctx cutting the settle waits short (Run's shutdown); a
// load cut short changes nothing and returns ctx's error.
func (s *FileSource) load(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.status.Load()
	cur := s.current.Load()
	files, err := s.gather()
	if err == nil && (cur == nil || cur.Digest != digest(files)) {
		files, err = s.settled(ctx, files, cur)
	}
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: no attempt to report
	}
	if s.onLoad != nil {
		defer func() { s.onLoad(*s.status.Load()) }()
	}
	now := time.Now()
	var snap *Snapshot
	if err == nil {
		if cur != nil && cur.Digest == digest(files) {
			st := *prev
			st.LastError, st.LastAttempt, st.LastSuccess = nil, now, now
			s.status.Store(&st)
			return nil
		}
		if snap, err = Load(files); err == nil {
			err = checkEmptied(cur, snap)
		}
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

// settled returns the files once their content is stable: it waits the
// settle interval and reads them again until two consecutive reads agree, or
// they equal the serving snapshot cur (a change undone). first is the read
// that found a change.
//
// Errors: a read error of a later read; the files still changing after
// maxSettleRounds (naming the first file that changed); ctx's error.
func (s *FileSource) settled(ctx context.Context, first []SourceFile, cur *Snapshot) ([]SourceFile, error) {
	if s.settle <= 0 {
		return first, nil
	}
	files, changed := first, ""
	for range maxSettleRounds {
		t := time.NewTimer(s.settle)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		again, err := s.gather()
		if err != nil {
			return nil, err
		}
		d := digest(again)
		if d == digest(files) || (cur != nil && d == cur.Digest) {
			return again, nil
		}
		changed = firstChanged(files, again)
		s.log.Info("policy files still changing; waiting for them to settle", "file", changed, "settleInterval", s.settle.String())
		files = again
	}
	return nil, fmt.Errorf("policy file %s kept changing for %s (read %d times, %s apart): not loaded, the last good policy keeps serving; "+
		"update policy files atomically (write a temporary file in the same directory, then rename it over the policy file)",
		changed, time.Duration(maxSettleRounds)*s.settle, maxSettleRounds+1, s.settle)
}

// firstChanged names the first file whose content (or presence) differs
// between two reads.
func firstChanged(a, b []SourceFile) string {
	old := make(map[string][]byte, len(a))
	for _, f := range a {
		old[f.Name] = f.Data
	}
	for _, f := range b {
		data, ok := old[f.Name]
		if !ok || !bytes.Equal(data, f.Data) {
			return f.Name
		}
		delete(old, f.Name)
	}
	for _, f := range a {
		if _, gone := old[f.Name]; gone {
			return f.Name
		}
	}
	return "(none)"
}

// checkEmptied refuses files that held objects (or tokens) in the serving
// snapshot cur and hold none in next: a truncated or emptied file (empty,
// only comments, an empty List) is far more often a write in progress or a
// mistake than the intent to drop all its policy (deleting the file says
// that). Files new since, or removed, are not checked.
//
// Errors: one per emptied file, naming it and the fix.
func checkEmptied(cur, next *Snapshot) error {
	if cur == nil {
		return nil
	}
	var errs []error
	for _, name := range next.Files {
		if cur.FileObjects[name] > 0 && next.FileObjects[name] == 0 {
			errs = append(errs, fmt.Errorf("policy file %s held objects in the serving policy and now holds none (empty, truncated, only comments or an empty List): "+
				"not loaded, the last good policy keeps serving; to drop its objects delete the file, otherwise restore its content "+
				"(update policy files atomically: write a temporary file, then rename it over)", name))
		}
	}
	return errors.Join(errs...)
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
// load); load errors are reported through Status and logs. A reload starts
// reloadDebounce after the last file event, then waits for the files to
// settle (see Load).
func (s *FileSource) Run(ctx context.Context) error {
	if s.fsys != nil {
		if s.Current() == nil {
			_ = s.load(ctx)
		}
		<-ctx.Done()
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		_ = s.load(ctx)
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
	_ = s.load(ctx)

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
			_ = s.load(ctx)
		case <-poll:
			_ = s.load(ctx)
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
