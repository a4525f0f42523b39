package policy_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"deputy.dev/deputy/policy"
)

// sourceNarrowRole is a ClusterRole whose last line narrows it: the first
// write of an in-place rewrite (everything but that line) grants get on every
// configmap, more than the old and the new version.
const (
	sourceNarrowFirst = loadAPIVersion + "kind: ClusterRole\nmetadata:\n  name: reader\nrules:\n- verbs: [get]\n  apiGroups: [\"\"]\n  resources: [configmaps]\n"
	sourceNarrowRest  = "  resourceNames: [public]\n"
)

// sourceSnapshots records every snapshot a source swaps in.
type sourceSnapshots struct {
	mu    sync.Mutex
	snaps []*policy.Snapshot
}

func (r *sourceSnapshots) add(s *policy.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, s)
}

// halfWritten returns how many recorded snapshots hold ClusterRole reader
// without its resourceNames: the first write of an in-place rewrite.
func (r *sourceSnapshots) halfWritten() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.snaps {
		if cr := s.RBAC.ClusterRole("reader"); cr != nil && len(cr.Rules) == 1 && len(cr.Rules[0].ResourceNames) == 0 {
			n++
		}
	}
	return n
}

// sourceRewriteInPlace truncates p and writes content in two writes, gap
// apart, as a writer without a temporary file and rename does.
func sourceRewriteInPlace(t *testing.T, p, first, rest string, gap time.Duration) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gap)
	if _, err := f.WriteString(rest); err != nil {
		t.Fatal(err)
	}
}

// sourceChangingFS holds policy.yaml, whose content changes at every read
// while changing is set.
type sourceChangingFS struct {
	changing atomic.Bool
	reads    atomic.Int64
}

func (f *sourceChangingFS) Open(name string) (fs.File, error) {
	n := f.reads.Load()
	if f.changing.Load() {
		n = f.reads.Add(1)
	}
	return fstest.MapFS{"policy.yaml": {Data: []byte(loadClusterRole(fmt.Sprint("busy-", n)))}}.Open(name)
}

func sourceIsFinal(s *policy.Snapshot) bool {
	if s == nil {
		return false
	}
	cr := s.RBAC.ClusterRole("reader")
	return cr != nil && len(cr.Rules) == 1 && strings.Join(cr.Rules[0].ResourceNames, ",") == "public"
}

func TestFileSourceLoadsOnlySettledContent(t *testing.T) {
	// The settle interval is far longer than the gap between the two writes,
	// so scheduling delays cannot make the half-written file look settled.
	const settle = 300 * time.Millisecond
	const gap = 20 * time.Millisecond

	t.Run("a load started between the two writes of an in-place rewrite loads only the final content", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "policy.yaml", loadClusterRole("one"))
		var rec sourceSnapshots
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: settle})
		src.OnChange(rec.add)
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(sourceNarrowFirst); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- src.Load() }()
		time.Sleep(gap)
		if _, err := f.WriteString(sourceNarrowRest); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Load: %v", err)
		}
		if n := rec.halfWritten(); n != 0 {
			t.Errorf("%d snapshots of the half-written file were served", n)
		}
		if !sourceIsFinal(src.Current()) || !src.Status().Ready() {
			t.Errorf("the final content is not served: %+v", src.Status())
		}
	})

	t.Run("a watched file rewritten in place in two writes never serves the intermediate content", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "policy.yaml", loadClusterRole("one"))
		var rec sourceSnapshots
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: settle, OnLoad: onLoad, PollInterval: 10 * time.Millisecond})
		src.OnChange(rec.add)
		loadRun(t, src, loads)
		for i := range 3 {
			sourceRewriteInPlace(t, p, sourceNarrowFirst, sourceNarrowRest, gap)
			loadWaitFor(t, "the final content", func() bool { return sourceIsFinal(src.Current()) })
			// Back to the old version, atomically, for the next round.
			tmp := loadWrite(t, dir, ".policy.yaml.tmp", loadClusterRole(fmt.Sprint("one-", i)))
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
			loadWaitFor(t, "the old version", func() bool { return loadHas(src.Current(), fmt.Sprint("one-", i)) })
		}
		if n := rec.halfWritten(); n != 0 {
			t.Errorf("%d snapshots of the half-written file were served", n)
		}
	})

	t.Run("files that keep changing are not loaded and turn readiness red naming the file", func(t *testing.T) {
		fsys := &sourceChangingFS{}
		src := policy.NewFileSource([]string{"."}, policy.FileSourceOptions{FS: fsys, SettleInterval: time.Millisecond})
		fsys.changing.Store(false)
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		good := src.Current()
		fsys.changing.Store(true)
		err := src.Load()
		if err == nil || !strings.Contains(err.Error(), "policy file policy.yaml kept changing") || !strings.Contains(err.Error(), "rename it over") {
			t.Fatalf("Load error = %v, want one naming policy.yaml, that it kept changing, and the atomic rename", err)
		}
		if src.Current() != good || src.Status().Ready() {
			t.Errorf("a changing file replaced the snapshot or left readiness green: %+v", src.Status())
		}
		fsys.changing.Store(false)
		if err := src.Load(); err != nil || src.Current() == good || !src.Status().Ready() {
			t.Errorf("once the writer stopped the file did not load: %v", err)
		}
	})

	t.Run("the embedded example policy loads without settling by default", func(t *testing.T) {
		fsys := fstest.MapFS{"rbac.yaml": {Data: []byte(loadClusterRole("embedded"))}}
		src := policy.NewFileSource([]string{"."}, policy.FileSourceOptions{FS: fsys})
		done := make(chan error, 1)
		go func() { done <- src.Load() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Load of an embedded policy is still waiting")
		}
		if !loadHas(src.Current(), "embedded") {
			t.Errorf("the embedded policy was not loaded")
		}
	})
}

func TestFileSourceRefusesEmptiedFiles(t *testing.T) {
	tests := []struct {
		name    string
		content string
		file    string // which file to rewrite; "" the one with objects
	}{
		{name: "a file truncated to nothing", content: ""},
		{name: "a file left with blank lines", content: "\n  \n\n"},
		{name: "a file left with only comments and document markers", content: "# policy moved elsewhere\n---\n# nothing here\n...\n"},
		{name: "a JSON file emptied", content: " \n", file: "role.json"},
		{name: "a token file emptied", content: "\n", file: "tokens.csv"},
		{name: "a file rewritten to an empty List", content: "apiVersion: v1\nkind: List\nitems: []\n"},
		{name: "a JSON file rewritten to an empty List", content: `{"apiVersion":"v1","kind":"List","items":[]}`, file: "role.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name+" is a load error naming it, and the last good policy keeps serving", func(t *testing.T) {
			dir := t.TempDir()
			loadWrite(t, dir, "policy.yaml", loadClusterRole("one")+"---\n"+loadClusterRole("two"))
			loadWrite(t, dir, "role.json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"three"}}`)
			loadWrite(t, dir, "tokens.csv", "some-token,alice,uid-alice\n")
			loadWrite(t, dir, "empty.yaml", "# kept empty on purpose\n")
			src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: -1})
			if err := src.Load(); err != nil {
				t.Fatal(err)
			}
			good := src.Current()
			file := tc.file
			if file == "" {
				file = "policy.yaml"
			}
			p := loadWrite(t, dir, file, tc.content)
			err := src.Load()
			want := "policy file " + p + " held objects in the serving policy and now holds none"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "delete the file") {
				t.Fatalf("Load error = %v, want one containing %q and the fix", err, want)
			}
			st := src.Status()
			if src.Current() != good || st.Ready() || st.LastError == nil || !strings.Contains(st.LastError.Error(), p) {
				t.Errorf("Current changed = %t, Status() = %+v; want the last good policy, not ready, the error naming %s", src.Current() != good, st, p)
			}
		})
	}

	t.Run("deleting a file drops its objects", func(t *testing.T) {
		dir := t.TempDir()
		loadWrite(t, dir, "a.yaml", loadClusterRole("one"))
		b := loadWrite(t, dir, "b.yaml", loadClusterRole("two"))
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: -1})
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
		if err := src.Load(); err != nil || loadHas(src.Current(), "two") || !loadHas(src.Current(), "one") {
			t.Errorf("Load error = %v, two served = %t; want two dropped", err, loadHas(src.Current(), "two"))
		}
	})

	t.Run("a file that was empty may stay empty while others change", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "a.yaml", loadClusterRole("one"))
		loadWrite(t, dir, "empty.yaml", "# nothing yet\n")
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: -1})
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		loadWrite(t, dir, filepath.Base(p), loadClusterRole("two"))
		if err := src.Load(); err != nil || !loadHas(src.Current(), "two") {
			t.Errorf("Load error = %v, want two served", err)
		}
	})

	t.Run("restoring the emptied file turns readiness green again", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "a.yaml", loadClusterRole("one"))
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: -1})
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		loadWrite(t, dir, filepath.Base(p), "")
		if err := src.Load(); err == nil {
			t.Fatal("emptying the file loaded")
		}
		loadWrite(t, dir, filepath.Base(p), loadClusterRole("two"))
		if err := src.Load(); err != nil || !loadHas(src.Current(), "two") || !src.Status().Ready() {
			t.Errorf("Load error = %v, Status() = %+v; want two served and ready", err, src.Status())
		}
	})

	t.Run("an emptied file is refused by a watching source too", func(t *testing.T) {
		dir := t.TempDir()
		p := loadWrite(t, dir, "a.yaml", loadClusterRole("one"))
		loads, onLoad := loadStatusChan()
		src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{SettleInterval: 10 * time.Millisecond, OnLoad: onLoad})
		loadRun(t, src, loads)
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
		loadWaitFor(t, "readiness to turn red", func() bool {
			err := src.Status().LastError
			return err != nil && strings.Contains(err.Error(), p)
		})
		if !loadHas(src.Current(), "one") {
			t.Errorf("the last good policy is not served")
		}
	})
}
