package source

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source/localrepo"
)

// Render workers. What a render allocates depends on what the repository
// holds, and no byte limit bounds it: kyaml expands YAML aliases without
// bound (421 bytes of nested anchors take ~440 MiB, 530 bytes ~40 GB), a
// kustomize patch that targets every object is copied into each, and
// decoding YAML takes up to ~40 times the file's size (measured: 248 MiB of
// `[[],[],…]` took 10 GB). kustomize has no hook to stop a build midway.
// deputy is also kube-apiserver's authorization webhook, so no tenant's
// render may take its memory: every render runs in a render worker, the
// deputy binary itself started again (/proc/self/exe) with
// DEPUTY_RENDER_WORKER set, whose main calls RenderWorkerMain first thing.
// The worker
//   - reads one request (workerRequest, JSON) from stdin: where the
//     repository is on disk, the commit (deputy resolved the revision), the
//     source path, the limits and the kustomize options; deputy holds the
//     repository's lock (no fetch changes it) until the worker has ended;
//   - bounds its own memory: a watchdog reads the Go runtime's memory (what
//     GOMEMLIMIT counts: heap, stacks and runtime metadata, less what was
//     returned to the OS) every 10 ms and exits with exitWorkerMemory above
//     Limits.MaxRenderMemory; debug.SetMemoryLimit makes the GC work harder
//     before that; RLIMIT_AS, set generously above (the address space the
//     runtime had at start, plus twice the limit), makes an allocation that
//     jumps past the watchdog fail at once; its oom_score_adj is 1000, so
//     that if deputy's container fills up anyway, the kernel picks a worker;
//   - renders as deputy did in process (renderCommit: gitFS, the render
//     budget, the kustomization reference walk, kustomize's remote loading
//     set up for itself with configureKustomizeRemote), keeps the objects as
//     JSON and checks their size as deputy will hold them (decodedSize)
//     against Limits.MaxRenderBytes, then writes them to stdout, one frame
//     each, and an end frame (or one error frame), and exits.
// deputy reads the frames within the same limits, kills the worker (and
// what it started: it has its own process group) at the operation's
// deadline, and turns how it ended into an error: a *LimitError naming
// sync.limits.maxRenderMemory when it ran out of memory, the worker's own
// *LimitError when it exceeded another limit. A binary whose main does not
// call RenderWorkerMain fails every render (closed): nothing is rendered
// in deputy's own process.

// renderWorkerEnv selects render-worker mode (IsRenderWorker).
const renderWorkerEnv = "DEPUTY_RENDER_WORKER"

// renderWorkerHello is the first line a render worker writes: anything else
// means the binary does not run as one.
const renderWorkerHello = "deputy-render-worker/1\n"

const (
	// exitWorkerMemory is the worker's exit code when the watchdog found it
	// over Limits.MaxRenderMemory.
	exitWorkerMemory = 86
	// exitWorkerRequest is its exit code for a request it cannot read.
	exitWorkerRequest = 87
)

const (
	maxWorkerRequestBytes = 1 << 20
	// maxWorkerStderrBytes is how much of a worker's stderr deputy keeps
	// (the start of it: a Go runtime's fatal error comes first).
	maxWorkerStderrBytes = 8 << 10
	workerWatchdogPeriod = 10 * time.Millisecond
	// workerAddressSlack is added, with twice the memory limit, to the
	// address space the worker's runtime had at start for its RLIMIT_AS.
	workerAddressSlack = 256 << 20
)

// workerHelloTimeout is how long a worker has to write its first line (it
// takes about 0.1 s).
var workerHelloTimeout = 30 * time.Second

// workerArgs are the worker's arguments. deputy's own binary never parses
// them (RenderWorkerMain runs first); a test binary that lacks the hook runs
// no test with them, and the render then fails closed.
var workerArgs = []string{"-test.run=^$"}

// IsRenderWorker reports whether this process was started as a render
// worker. A program that renders through a Cache (deputy's main, a program
// that runs the sync engine, and a test binary whose tests render through
// one) must, first thing in main (or in
// TestMain, or an init function of a test file):
//
//	if source.IsRenderWorker() {
//		os.Exit(source.RenderWorkerMain())
//	}
func IsRenderWorker() bool { return os.Getenv(renderWorkerEnv) != "" }

// workerRepo is where a render worker finds the repository: deputy's bare
// mirror, or a local repository inside an allowed directory (opened again
// with localrepo.Open, confined to LocalRoot).
type workerRepo struct {
	Mirror    string `json:"mirror,omitempty"`
	LocalRoot string `json:"localRoot,omitempty"`
	LocalPath string `json:"localPath,omitempty"`
	// URL is the Application's repoURL, for messages.
	URL string `json:"url"`
}

func (w workerRepo) open() (*git.Repository, error) {
	switch {
	case w.Mirror != "":
		repo, err := git.PlainOpen(w.Mirror)
		if err != nil {
			return nil, fmt.Errorf("failed to open the mirror of %s: %w", w.URL, err)
		}
		return repo, nil
	case w.LocalPath != "":
		return localrepo.Open(w.LocalRoot, w.LocalPath, w.URL)
	}
	return nil, errors.New("the render request names no repository")
}

// workerRequest is what deputy sends a render worker.
type workerRequest struct {
	Repo workerRepo `json:"repo"`
	// Commit is the full SHA of the commit to render.
	Commit string `json:"commit"`
	// SourcePath is the Application's spec.source.path, for messages; Dir
	// is the same path cleaned, repository-relative.
	SourcePath string `json:"sourcePath"`
	Dir        string `json:"dir"`
	// Helm is spec.source.helm, defaults filled by the sync engine.
	Helm *v1alpha1.HelmSource `json:"helm,omitempty"`
	// Refs are the ref sources the Helm source's $REF/path files read.
	Refs      map[string]workerRef `json:"refs,omitempty"`
	Limits    Limits               `json:"limits"`
	Kustomize KustomizeOptions     `json:"kustomize"`
	// Deadline is the operation's (the worker's reads fail after it).
	Deadline time.Time `json:"deadline,omitzero"`
	// Chart, when set, is a chart from a Helm repository or an OCI
	// registry to fetch and render instead of Repo (chart.go).
	Chart *workerChart `json:"chart,omitempty"`
	// ChartCache holds chart archives by digest; Project and SourceRepos
	// are the project's, which must permit a remote dependency's
	// repository.
	ChartCache  string   `json:"chartCache,omitempty"`
	Project     string   `json:"project,omitempty"`
	SourceRepos []string `json:"sourceRepos,omitempty"`
}

// The kinds of render a worker says it started.
const (
	workerKustomize = "kustomize"
	workerManifests = "manifests"
	workerHelm      = "helm"
)

// workerFrame is one line of a worker's output: the kind of render it
// started (written at once), an object, its error, or the end.
type workerFrame struct {
	Kind   string          `json:"kind,omitempty"`
	Object json.RawMessage `json:"object,omitempty"`
	Error  *workerError    `json:"error,omitempty"`
	End    *workerStats    `json:"end,omitempty"`
}

// workerError is a render's error: its message, and the limit when a limit
// was exceeded, so that deputy's error is a *LimitError too.
type workerError struct {
	Message string      `json:"message"`
	Limit   *LimitError `json:"limit,omitempty"`
	// Deadline is set when the operation's deadline ended the render.
	Deadline bool `json:"deadline,omitempty"`
}

// reportedError is a worker's error in deputy: the worker's message,
// unwrapping to its *LimitError (or context.DeadlineExceeded).
type reportedError struct {
	msg   string
	cause error
}

func (e *reportedError) Error() string { return e.msg }
func (e *reportedError) Unwrap() error { return e.cause }

func (e *workerError) err() error {
	r := &reportedError{msg: e.Message}
	switch {
	case e.Limit != nil:
		r.cause = e.Limit
	case e.Deadline:
		r.cause = context.DeadlineExceeded
	}
	return r
}

// workerStats are what a worker that finished reports about itself.
type workerStats struct {
	// Objects is the number of objects it wrote.
	Objects int `json:"objects"`
	// PeakMemory is the most Go memory the watchdog saw in use (bytes).
	PeakMemory uint64 `json:"peakMemory"`
	// PeakRSS is the worker's peak resident set (VmHWM, bytes; Linux).
	PeakRSS uint64 `json:"peakRSS,omitempty"`
	// Revision is a chart source's resolved version.
	Revision string `json:"revision,omitempty"`
	// Bytes is what deputy counted of the objects it read (decodedSize).
	Bytes int64 `json:"-"`
}

// workerCommand starts render workers. The zero value starts deputy's own
// binary; tests set path and env.
type workerCommand struct {
	path string
	env  []string
}

// jsonValueOverhead is what decodedSize charges for each value and key of
// an object's JSON on top of its bytes: decoded into an
// unstructured.Unstructured, a value takes at most about 41 bytes besides
// its text (measured: maps of empty maps, lists of empty lists, lists of
// short strings); a Deployment takes about 4 times its JSON in all.
const jsonValueOverhead = 48

// decodedSize is an upper estimate of the memory an object's JSON takes
// once decoded: its bytes plus jsonValueOverhead for every '{', '[', ','
// and ':' outside strings. It bounds what a render's objects take in
// deputy's memory, whatever their shape (12 to 20 times their JSON for
// lists of empty lists or maps).
func decodedSize(js []byte) int64 {
	n := int64(len(js))
	inString, escaped := false, false
	for _, c := range js {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{', c == '[', c == ',', c == ':':
			n += jsonValueOverhead
		}
	}
	return n
}

// renderBytesLimit is the *LimitError of objects whose decodedSize exceeds
// MaxRenderBytes.
func renderBytesLimit(l Limits) *LimitError {
	return &LimitError{Field: FieldMaxRenderBytes, What: fmt.Sprintf("the size of the rendered objects in memory (estimated: more than %s)", bytesString(l.MaxRenderBytes)), Limit: bytesString(l.MaxRenderBytes)}
}

// selfExecutable is the binary to start as a render worker: this process's
// own (/proc/self/exe on Linux, which names it even when the file was
// replaced since it started).
func selfExecutable() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}

// run starts a worker for req, reads its objects and waits for it.
func (w workerCommand) run(ctx context.Context, req workerRequest) ([]*unstructured.Unstructured, *workerStats, error) {
	if IsRenderWorker() {
		return nil, nil, errors.New("a render worker may not start another one: the binary renders through a Cache in render-worker mode (its main must call source.RenderWorkerMain first when source.IsRenderWorker() is true)")
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	req.Limits = req.Limits.WithDefaults()
	exe := w.path
	if exe == "" {
		var err error
		if exe, err = selfExecutable(); err != nil {
			return nil, nil, fmt.Errorf("failed to find deputy's own binary to start a render worker: %w", err)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to encode the render request: %w", err)
	}
	env := append(append(os.Environ(), w.env...), renderWorkerEnv+"=1")
	if req.Kustomize.RemoteResources {
		// kustomize clones remote bases into the temporary directory: the
		// worker's own goes away with it, even when it was killed.
		tmp, err := os.MkdirTemp("", "deputy-render-")
		if err != nil {
			return nil, nil, fmt.Errorf("failed to create the render worker's temporary directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		env = append(env, "TMPDIR="+tmp)
	}

	// The worker is started, and waited for, from one locked OS thread: its
	// parent-death signal fires when the thread that started it ends.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.CommandContext(ctx, exe, workerArgs...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(body)
	stderr := &headBuffer{max: maxWorkerStderrBytes}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	setWorkerProcess(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to start the render worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("failed to start the render worker %s: %w", exe, err)
	}
	// A binary that does not answer as a worker at once is stopped (one
	// without the hook could run as long as the operation may).
	var answered atomic.Bool
	helloTimer := time.AfterFunc(workerHelloTimeout, func() {
		if !answered.Load() {
			killWorker(cmd)
		}
	})
	res := readWorkerOutput(stdout, req.Limits, func() { answered.Store(true) })
	helloTimer.Stop()
	killed := !res.hello
	if res.end == nil && res.reported == nil {
		// Nothing more will be read: a worker still writing would block.
		killWorker(cmd)
		killed = true
	}
	waitErr := cmd.Wait()
	// What the worker started and left behind goes too.
	killGroup(cmd)
	var exitErr *exec.ExitError
	exited := errors.As(waitErr, &exitErr)
	label := renderLabel(res.kind, req.SourcePath, req.Commit)
	switch {
	case ctx.Err() != nil:
		return nil, nil, fmt.Errorf("%s: %w", label, ctx.Err())
	case res.limit != nil:
		return nil, nil, fmt.Errorf("%s: %w", label, res.limit)
	case exited && exitErr.ExitCode() == exitWorkerMemory,
		res.end == nil && res.reported == nil && exited && (exitErr.ExitCode() == 2 || exitErr.ExitCode() == raceRuntimeExit) && outOfMemory(stderr.String()):
		// The watchdog, or the Go runtime's fatal error (exit status 2;
		// the race runtime's 66 in -race test binaries) when RLIMIT_AS
		// refused memory.
		return nil, nil, fmt.Errorf("%s: %w", label, &LimitError{Field: FieldMaxRenderMemory, What: "the memory the render used", Limit: bytesString(req.Limits.MaxRenderMemory)})
	case res.reported != nil:
		return nil, nil, res.reported
	case exited && !exitErr.Exited() && !killed:
		return nil, nil, fmt.Errorf("%s: the render worker was killed (%s) before it finished: the kernel's OOM killer does this when deputy's container reaches its memory limit, which must leave room for deputy and sync.parallelism render workers of up to %s each (%s)%s",
			label, exitErr.ProcessState, bytesString(req.Limits.MaxRenderMemory), FieldMaxRenderMemory, stderrNote(stderr))
	case !res.hello:
		return nil, nil, fmt.Errorf("%s: the render worker did not start: %s does not run as deputy's render worker (its main must call source.RenderWorkerMain first when source.IsRenderWorker() is true), and deputy renders nothing in its own process (%s)%s",
			label, exe, describeExit(waitErr), stderrNote(stderr))
	case res.malformed != nil:
		return nil, nil, fmt.Errorf("%s: the render worker failed (%s): %w%s", label, describeExit(waitErr), res.malformed, stderrNote(stderr))
	case res.end != nil && waitErr == nil:
		return res.objects, res.end, nil
	}
	return nil, nil, fmt.Errorf("%s: the render worker failed (%s) without a result%s", label, describeExit(waitErr), stderrNote(stderr))
}

// workerOutput is what deputy read from a worker.
type workerOutput struct {
	hello   bool
	kind    string
	objects []*unstructured.Unstructured
	// end is set when the worker finished; reported when it reported an
	// error; limit when its output exceeded a limit; malformed when the
	// output could not be read.
	end       *workerStats
	reported  error
	limit     *LimitError
	malformed error
}

// objectFramePrefix starts every object frame: the worker writes them as
// `{"object":JSON}` on one line (JSON encodes newlines in strings), and
// deputy decodes the object straight from the line it read, without a copy.
const objectFramePrefix = `{"object":`

// readWorkerOutput reads the hello line and the frames: objects whose
// decodedSize totals at most MaxRenderBytes, at most MaxObjects of them.
// Each line is read once and each object decoded from it: deputy holds one
// object's JSON at a time next to the decoded objects.
func readWorkerOutput(r io.Reader, l Limits, hello func()) workerOutput {
	var out workerOutput
	// decodedSize is at least the JSON's size: the frames' own bytes and
	// the end or error frame fit in the slack.
	limited := &boundedReader{r: r, left: l.MaxRenderBytes + 32*int64(l.MaxObjects) + 1<<20}
	br := bufio.NewReaderSize(limited, 64<<10)
	first := make([]byte, len(renderWorkerHello))
	if _, err := io.ReadFull(br, first); err != nil || string(first) != renderWorkerHello {
		return out
	}
	out.hello = true
	hello()
	var size int64
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			switch {
			case limited.exceeded:
				out.limit = renderBytesLimit(l)
			case errors.Is(err, io.EOF) && len(line) == 0:
			default:
				out.malformed = fmt.Errorf("malformed output: %w", cmpErr(err, io.ErrUnexpectedEOF))
			}
			return out
		}
		line = bytes.TrimRight(line, "\n")
		if obj, ok := bytes.CutPrefix(line, []byte(objectFramePrefix)); ok && bytes.HasSuffix(obj, []byte("}")) {
			obj = obj[:len(obj)-1]
			if size += decodedSize(obj); size > l.MaxRenderBytes {
				out.limit = renderBytesLimit(l)
				return out
			}
			if len(out.objects) >= l.MaxObjects {
				out.limit = &LimitError{Field: FieldMaxObjects, What: fmt.Sprintf("the render's object count (more than %d)", l.MaxObjects), Limit: fmt.Sprint(l.MaxObjects)}
				return out
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(obj); err != nil {
				out.malformed = fmt.Errorf("object %d: %w", len(out.objects)+1, err)
				return out
			}
			out.objects = append(out.objects, u)
			continue
		}
		var f workerFrame
		if err := json.Unmarshal(line, &f); err != nil {
			out.malformed = fmt.Errorf("malformed output: %w", err)
			return out
		}
		switch {
		case f.Kind != "":
			out.kind = f.Kind
		case f.Error != nil:
			out.reported = f.Error.err()
			return out
		case f.End != nil:
			out.end = f.End
			out.end.Bytes = size
			return out
		}
	}
}

// cmpErr is err, or def when err is io.EOF (input that ended midway).
func cmpErr(err, def error) error {
	if errors.Is(err, io.EOF) {
		return def
	}
	return err
}

// boundedReader reads at most left bytes, then fails.
type boundedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

var errWorkerOutputLimit = errors.New("the render worker's output exceeds its limit")

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.exceeded = true
		return 0, errWorkerOutputLimit
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(room, len(p))])
	}
	if h.buf.Len()+len(p) > h.max {
		h.truncated = true
	}
	return len(p), nil
}

func (h *headBuffer) String() string { return h.buf.String() }

// stderrNote is ": <the worker's stderr>" (its first lines), or "".
func stderrNote(h *headBuffer) string {
	s := strings.TrimSpace(h.String())
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 5 {
		lines = append(lines[:5], "…")
	}
	return ": " + strings.Join(lines, " | ")
}

func describeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// raceRuntimeExit is the exit status of a binary built with -race when its
// ThreadSanitizer runtime fails (GORACE exitcode, default 66): deputy's
// tests are built so, and the render worker is the test binary.
const raceRuntimeExit = 66

// outOfMemory reports whether a worker's stderr says the Go runtime could
// not get memory: the RLIMIT_AS backstop (or the system) refused it. (A
// binary built with -race says "too many address space collisions", or
// "ThreadSanitizer failed to allocate … (errno: 12)", when it cannot map
// more: deputy is never built so, its tests are.)
func outOfMemory(stderr string) bool {
	for _, s := range []string{"out of memory", "cannot allocate memory", "too many address space collisions", "ThreadSanitizer failed to allocate"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}
