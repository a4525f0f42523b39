package source

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deputy.dev/deputy/policy/v1alpha1"
)

// The source tests render (Cache.Render), so this test binary is a render
// worker too, selected first thing as deputy's main does. An init function
// rather than TestMain, as in package syncer's tests. fakeWorkerEnv selects
// the fake workers of TestRenderWorkerProtocol.
func init() {
	if IsRenderWorker() {
		switch mode := os.Getenv(fakeWorkerEnv); mode {
		case "":
			os.Exit(RenderWorkerMain())
		case "nohook":
			// Carry on as a binary without the hook would: run the tests
			// the worker's arguments select (none).
		default:
			os.Exit(fakeWorker(mode))
		}
	}
}

const fakeWorkerEnv = "DEPUTY_TEST_FAKE_RENDER_WORKER"

// fakeWorker is a render worker that misbehaves as mode says.
func fakeWorker(mode string) int {
	if mode == "silent" {
		time.Sleep(time.Hour)
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	out.WriteString(renderWorkerHello)
	out.Flush()
	var req workerRequest
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		return exitWorkerRequest
	}
	frame := func(i int, size int) {
		fmt.Fprintf(out, `{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d"},"data":{"k":"%s"}}}`+"\n", i, strings.Repeat("x", size))
	}
	var keep [][]byte
	switch mode {
	case "crash":
		if tmp := os.TempDir(); strings.HasPrefix(filepath.Base(tmp), "deputy-render-") {
			_ = os.WriteFile(filepath.Join(tmp, "clone"), []byte("x"), 0o600) // what kustomize would leave
		}
		frame(0, 1)
		fmt.Fprintln(os.Stderr, "panic: kustomize exploded")
		return 2
	case "hang":
		out.Flush()
		time.Sleep(time.Hour)
	case "flood":
		for i := 0; ; i++ {
			frame(i, 64<<10)
		}
	case "objects":
		for i := 0; ; i++ {
			frame(i, 1)
		}
	case "hog":
		// Small allocations, kept: the watchdog stops it.
		boundWorkerMemory(req.Limits.MaxRenderMemory)
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	case "jump":
		// One allocation far past the watchdog's next look: RLIMIT_AS
		// refuses it.
		boundWorkerMemory(req.Limits.MaxRenderMemory)
		keep = append(keep, make([]byte, 64<<30))
		keep[0][0] = 1
	case "truncated":
		out.WriteString(`{"object":{"apiVersion":"v1",`)
		return 0
	}
	return 3
}

// The parent's side of the worker protocol: each way a worker can end is
// an error that says what happened, naming the limit when one was
// exceeded, within the operation's deadline.
func TestRenderWorkerProtocol(t *testing.T) {
	req := workerRequest{Commit: "0000000000000000000000000000000000000000", Dir: "app"}
	for _, tc := range []struct {
		name    string
		mode    string
		limits  Limits
		timeout time.Duration
		field   string // the *LimitError's field, or
		want    string // a substring of the error
	}{
		{"a worker that crashes fails the render with its stderr", "crash", Limits{}, 0, "", "kustomize exploded"},
		{"a worker that never answers is killed at the operation's deadline", "hang", Limits{}, 2 * time.Second, "", context.DeadlineExceeded.Error()},
		{"output over maxRenderBytes stops the worker", "flood", Limits{MaxRenderBytes: 1 << 20}, 0, FieldMaxRenderBytes, ""},
		{"more objects than maxObjects stop the worker", "objects", Limits{MaxObjects: 100}, 0, FieldMaxObjects, ""},
		{"a worker over maxRenderMemory is stopped by its watchdog", "hog", Limits{MaxRenderMemory: 64 << 20}, 0, FieldMaxRenderMemory, ""},
		{"an allocation past the watchdog fails on RLIMIT_AS", "jump", Limits{MaxRenderMemory: 64 << 20}, 0, FieldMaxRenderMemory, ""},
		{"output cut short is an error", "truncated", Limits{}, 0, "", "malformed output"},
		{"a binary without the worker hook fails closed", "nohook", Limits{}, 0, "", "does not run as deputy's render worker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			r := req
			r.Limits = tc.limits
			start := time.Now()
			objs, _, err := workerCommand{env: []string{fakeWorkerEnv + "=" + tc.mode}}.run(ctx, r)
			took := time.Since(start)
			if err == nil {
				t.Fatalf("run = %d objects, no error", len(objs))
			}
			if tc.field != "" {
				var le *LimitError
				if !errors.As(err, &le) || le.Field != tc.field {
					t.Fatalf("err = %v, want a *LimitError naming %s", err, tc.field)
				}
			} else if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if tc.timeout > 0 && took > tc.timeout+10*time.Second {
				t.Errorf("the run took %s with a deadline of %s", took, tc.timeout)
			}
			t.Logf("%s: %v", took.Round(time.Millisecond), err)
		})
	}
	t.Run("a binary that does not answer is stopped", func(t *testing.T) {
		prev := workerHelloTimeout
		workerHelloTimeout = time.Second
		t.Cleanup(func() { workerHelloTimeout = prev })
		start := time.Now()
		_, _, err := workerCommand{env: []string{fakeWorkerEnv + "=silent"}}.run(t.Context(), req)
		if err == nil || !strings.Contains(err.Error(), "does not run as deputy's render worker") || time.Since(start) > 20*time.Second {
			t.Fatalf("err = %v after %s", err, time.Since(start))
		}
	})
	t.Run("a missing binary fails to start", func(t *testing.T) {
		_, _, err := workerCommand{path: t.TempDir() + "/no-such-deputy"}.run(t.Context(), req)
		if err == nil || !strings.Contains(err.Error(), "failed to start the render worker") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a render worker does not start another", func(t *testing.T) {
		t.Setenv(renderWorkerEnv, "1")
		_, _, err := workerCommand{}.run(t.Context(), req)
		if err == nil || !strings.Contains(err.Error(), "may not start another") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("the worker's temporary directory is removed", func(t *testing.T) {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		r := req
		r.Kustomize.RemoteResources = true // kustomize clones remote bases there
		_, _, err := workerCommand{env: []string{fakeWorkerEnv + "=crash"}}.run(t.Context(), r)
		if err == nil {
			t.Fatal("the crash was not reported")
		}
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("%s holds %v", tmp, entries)
		}
	})
}

// A worker that renders reports the objects and its own memory, and reads
// a request it cannot use as an error naming it.
func TestRenderWorkerRenders(t *testing.T) {
	r := newTestRepo(t)
	r.write("app/kustomization.yaml", "resources:\n- cm.yaml\nnamePrefix: p-\n")
	r.write("app/cm.yaml", configMapYAML("a"))
	head := r.commit("k")
	where := workerRepo{LocalRoot: testTempRoot(t), LocalPath: r.dir, URL: r.dir}
	objs, stats, err := workerCommand{}.run(t.Context(), workerRequest{Repo: where, Commit: head.String(), SourcePath: "app", Dir: "app"})
	if err != nil || len(objs) != 1 || objs[0].GetName() != "p-a" {
		t.Fatalf("run = %v, %v", names(objs), err)
	}
	if stats.Objects != 1 || stats.PeakMemory == 0 || stats.PeakMemory > DefaultMaxRenderMemory {
		t.Errorf("stats = %+v", stats)
	}
	t.Logf("a small build: peak Go memory %s, peak RSS %s", bytesString(int64(stats.PeakMemory)), bytesString(int64(stats.PeakRSS)))
	if _, _, err := (workerCommand{}).run(t.Context(), workerRequest{Repo: where, Commit: head.String(), SourcePath: "nowhere", Dir: "nowhere"}); err == nil {
		t.Error("a directory without a kustomization rendered")
	}
	bad := where
	bad.LocalRoot = t.TempDir()
	if _, _, err := (workerCommand{}).run(t.Context(), workerRequest{Repo: bad, Commit: head.String(), SourcePath: "app", Dir: "app"}); err == nil || !strings.Contains(err.Error(), FieldLocalRepositories) {
		t.Errorf("a repository outside the allowed directory: %v", err)
	}
}

// laughs is a ConfigMap whose annotations are depth levels of 10 aliases
// each: 10^depth scalars once the aliases are expanded, from about 50 bytes
// per level.
func laughs(depth int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\n  annotations:\n")
	b.WriteString("    l0: &l0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < depth; i++ {
		fmt.Fprintf(&b, "    l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("data: {}\n")
	return b.String()
}

// amplified is a kustomization of n tiny ConfigMaps and one patch of
// valueBytes that targets all of them: kustomize's output is n × valueBytes.
func amplified(r *testRepo, dir string, n, valueBytes int) {
	var res strings.Builder
	for i := range n {
		fmt.Fprintf(&res, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%d}\n", i)
	}
	r.write(dir+"/cms.yaml", res.String())
	r.write(dir+"/patch.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: any}\ndata:\n  big: "+strings.Repeat("x", valueBytes)+"\n")
	r.write(dir+"/kustomization.yaml", "resources:\n- cms.yaml\npatches:\n- path: patch.yaml\n  target: {kind: ConfigMap}\n")
}

// resetPeakRSS resets this process's VmHWM to its current RSS (Linux
// clear_refs) and returns that RSS; ok is false where it cannot.
func resetPeakRSS(t *testing.T) (rss uint64, ok bool) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, false
	}
	return procStatusBytes("VmRSS:"), true
}

// Issue 12 review, items 1 and 2: what kustomize allocates for a hostile
// repository (YAML aliases expanded without bound; one patch copied into
// every object) is the render worker's, bounded by maxRenderMemory, and the
// output deputy reads back by maxRenderBytes: the render fails naming the
// limit and deputy's own peak RSS barely moves.
func TestRenderWorkerBoundsHostileKustomizations(t *testing.T) {
	r := newTestRepo(t)
	r.write("lol/kustomization.yaml", "resources:\n- cm.yaml\n")
	r.write("lol/cm.yaml", laughs(8)) // 10^8 scalars: ~40 GB in kustomize's process
	amplified(r, "amp", 400, 256<<10)
	r.commit("hostile")
	for _, tc := range []struct {
		name, path string
		limits     Limits
		field      string
	}{
		{"530 bytes of nested YAML aliases", "lol", Limits{MaxRenderMemory: 256 << 20}, FieldMaxRenderMemory},
		{"a 256 KiB patch copied into 400 objects, over maxRenderMemory", "amp", Limits{MaxRenderMemory: 64 << 20}, FieldMaxRenderMemory},
		{"a 256 KiB patch copied into 400 objects, over maxRenderBytes", "amp", Limits{MaxRenderBytes: 16 << 20}, FieldMaxRenderBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCache(t)
			c.limits = tc.limits
			base, measured := resetPeakRSS(t)
			start := time.Now()
			out, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: tc.path}, "")
			took := time.Since(start)
			var le *LimitError
			if !errors.As(err, &le) || le.Field != tc.field {
				n := 0
				if out != nil {
					n = len(out.Objects)
				}
				t.Fatalf("render = %d objects, %v; want a *LimitError naming %s", n, err, tc.field)
			}
			if !strings.Contains(err.Error(), "kustomize build "+tc.path) {
				t.Errorf("err = %v, want it to name the build", err)
			}
			if measured {
				grew := max(int64(procStatusBytes("VmHWM:"))-int64(base), 0)
				t.Logf("%s: %v; deputy's peak RSS grew by %s", took.Round(time.Millisecond), err, bytesString(grew))
				if grew > 64<<20 {
					t.Errorf("deputy's own peak RSS grew by %s", bytesString(grew))
				}
			}
		})
	}
}

// Issue 12 review, item 3: a pack's header declares its object count, and
// a pack of more than maxFetchObjects objects fails before go-git indexes
// any (its indexer keeps about 0.5 KiB per object, whatever their size).
func TestFetchObjectCount(t *testing.T) {
	srv := newGitServer(t) // skips without git
	manyObjects(t, srv.root+"/many.git", 3000)
	src := v1alpha1.ApplicationSource{RepoURL: srv.URL + "/many.git", Path: "app"}
	t.Run("over the limit", func(t *testing.T) {
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFetchObjects: 1000}}
		_, err := c.Render(t.Context(), src, "")
		var le *LimitError
		if !errors.As(err, &le) || le.Field != FieldMaxFetchObjects || !strings.Contains(err.Error(), "the fetched pack's object count (3008)") {
			t.Fatalf("err = %v, want a *LimitError naming %s", err, FieldMaxFetchObjects)
		}
		if entries, _ := os.ReadDir(c.dir + "/repos"); len(entries) != 0 {
			t.Errorf("a refused clone left %d directories in the cache", len(entries))
		}
	})
	t.Run("within the limit", func(t *testing.T) {
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFetchObjects: 3008}}
		out, err := c.Render(t.Context(), src, "")
		if err != nil || len(out.Objects) != 1 {
			t.Fatalf("render = %v, %v", out, err)
		}
	})
}

// manyObjects writes a bare repository at dir with one commit of n distinct
// tiny blobs (1000 per directory) and app/cm.yaml, repacked: n + n/1000 + 5
// objects in all.
func manyObjects(t testing.TB, dir string, n int) {
	t.Helper()
	git := func(stdin io.Reader, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Stdin = stdin
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(nil, "init", "-q", "--bare")
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		for i := range n {
			data := fmt.Sprint(i)
			fmt.Fprintf(w, "blob\nmark :%d\ndata %d\n%s\n", i+1, len(data), data)
		}
		cm := configMapYAML("small")
		fmt.Fprintf(w, "commit refs/heads/master\ncommitter a <a@b> 0 +0000\ndata 1\nx\n")
		for i := range n {
			fmt.Fprintf(w, "M 100644 :%d junk/%d/%d\n", i+1, i/1000, i)
		}
		fmt.Fprintf(w, "M 100644 inline app/cm.yaml\ndata %d\n%s\n", len(cm), cm)
		pw.CloseWithError(w.Flush())
	}()
	git(pr, "fast-import", "--quiet")
	git(nil, "symbolic-ref", "HEAD", "refs/heads/master")
	git(nil, "repack", "-adq")
}

// BenchmarkRenderSmall is one render of one small file, from a local
// repository: mostly what the render worker adds to every render (deputy's
// binary started again).
//
//	go test -run '^$' -bench BenchmarkRenderSmall ./syncer/source/
func BenchmarkRenderSmall(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	dir := b.TempDir() + "/small.git"
	manyObjects(b, dir, 0)
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	c := &Cache{dir: b.TempDir(), local: []string{tmp}}
	src := v1alpha1.ApplicationSource{RepoURL: dir, Path: "app"}
	for b.Loop() {
		if out, err := c.Render(b.Context(), src, ""); err != nil || len(out.Objects) != 1 {
			b.Fatal(out, err)
		}
	}
}

// decodedSize charges the JSON's bytes and jsonValueOverhead for every
// value and key outside strings, escaped quotes included.
func TestDecodedSize(t *testing.T) {
	for _, tc := range []struct {
		json   string
		values int
	}{
		{`{}`, 1},
		{`[[],[],[]]`, 6},
		{`{"a":1,"b":[2,3]}`, 6},
		{`{"a":"x,y:{[z"}`, 2},
		{`{"a":"say \"hi, there\": {","b":"\\"}`, 4},
	} {
		if got, want := decodedSize([]byte(tc.json)), int64(len(tc.json)+tc.values*jsonValueOverhead); got != want {
			t.Errorf("decodedSize(%s) = %d, want %d", tc.json, got, want)
		}
	}
}
