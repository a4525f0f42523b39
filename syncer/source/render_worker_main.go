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
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// This file is the render worker's side (see render_worker.go): read the
// request, bound its own memory, render, write the frames.

// RenderWorkerMain runs this process as a render worker (IsRenderWorker):
// it reads one request from stdin, writes the objects of one kustomize build
// to stdout and returns the exit code. See IsRenderWorker for how a main
// calls it.
func RenderWorkerMain() int {
	out := bufio.NewWriterSize(os.Stdout, 256<<10)
	defer out.Flush()
	if _, err := out.WriteString(renderWorkerHello); err != nil {
		return exitWorkerRequest
	}
	if err := out.Flush(); err != nil {
		return exitWorkerRequest
	}
	writeFrame := func(f workerFrame) {
		data, err := json.Marshal(f)
		if err != nil {
			data = []byte(`{"error":{"message":"failed to encode the result"}}`)
		}
		_, _ = out.Write(data)
		_ = out.WriteByte('\n')
	}
	body, err := io.ReadAll(io.LimitReader(os.Stdin, maxWorkerRequestBytes+1))
	var req workerRequest
	if err == nil && len(body) > maxWorkerRequestBytes {
		err = errors.New("the request is too large")
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeFrame(workerFrame{Error: &workerError{Message: "the render worker could not read its request: " + err.Error()}})
		return exitWorkerRequest
	}
	limits := req.Limits.WithDefaults()
	boundWorkerMemory(limits.MaxRenderMemory)

	ctx := context.Background()
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	configureKustomizeRemote(req.Kustomize.RemoteResources, req.Kustomize.RemoteTimeout, limits.MaxFileBytes)
	// The objects are kept here (in the worker's bounded memory) and
	// written only once the render is complete and within the limits, so
	// that deputy decodes no object of a render that fails.
	var objects bytes.Buffer
	n := 0
	var size int64
	started := func(kind string) {
		writeFrame(workerFrame{Kind: kind})
		_ = out.Flush()
	}
	emit := func(data []byte) error {
		// One frame is one line: no newline outside strings (JSON encodes
		// those in strings), none at the end (json.Encoder writes one).
		data = bytes.TrimSpace(data)
		if bytes.IndexByte(data, '\n') >= 0 {
			var c bytes.Buffer
			if err := json.Compact(&c, data); err != nil {
				return fmt.Errorf("failed to encode an object: %w", err)
			}
			data = c.Bytes()
		}
		if size += decodedSize(data); size > limits.MaxRenderBytes {
			return renderBytesLimit(limits)
		}
		n++
		objects.WriteString(`{"object":`)
		objects.Write(data)
		objects.WriteString("}\n")
		return nil
	}
	revision, err := workerRender(ctx, req, limits, started, emit)
	if err == nil {
		_, err = objects.WriteTo(out)
	}
	if err != nil {
		werr := &workerError{Message: err.Error()}
		var le *LimitError
		switch {
		case errors.As(err, &le):
			werr.Limit = le
		case ctx.Err() != nil:
			werr.Deadline = true
		}
		writeFrame(workerFrame{Error: werr})
		return 0
	}
	writeFrame(workerFrame{End: &workerStats{Objects: n, PeakMemory: workerPeak.Load(), PeakRSS: peakRSS(), Revision: revision}})
	return 0
}

// workerRender renders a chart source (workerRenderChart: it returns the
// chart's version), or opens the repository and the commit and renders it
// (renderCommit).
func workerRender(ctx context.Context, req workerRequest, limits Limits, started func(string), emit func([]byte) error) (string, error) {
	budget := newRenderBudget(ctx, limits)
	if req.Chart != nil {
		return workerRenderChart(ctx, req, budget, started, emit)
	}
	repo, err := req.Repo.open()
	if err != nil {
		return "", err
	}
	commit, err := repo.CommitObject(plumbing.NewHash(req.Commit))
	if err != nil {
		return "", fmt.Errorf("failed to read commit %s of %s: %w", req.Commit, req.Repo.URL, err)
	}
	refs, err := openWorkerRefs(req.Refs, budget)
	if err != nil {
		return "", err
	}
	return "", renderCommit(repo, commit, req.Repo.URL, req.SourcePath, req.Dir, req.Helm, refs, budget, req.Kustomize, dependencies(ctx, chartFetcher(req, limits)), started, emit)
}

// workerPeak is the most Go memory the watchdog saw in use.
var workerPeak atomic.Uint64

// boundWorkerMemory bounds this worker's memory to limit bytes: the GC's
// soft limit a tenth below it, a watchdog that exits with exitWorkerMemory
// above it, and (Linux) RLIMIT_AS and oom_score_adj.
func boundWorkerMemory(limit int64) {
	debug.SetMemoryLimit(limit - limit/10)
	limitAddressSpace(limit)
	preferOOMKill()
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	check := func() {
		metrics.Read(samples)
		used := samples[0].Value.Uint64() - samples[1].Value.Uint64()
		if used > workerPeak.Load() {
			workerPeak.Store(used)
		}
		if used > uint64(limit) {
			fmt.Fprintf(os.Stderr, "render worker: %d bytes of memory in use exceed %s (%s)\n", used, bytesString(limit), FieldMaxRenderMemory)
			os.Exit(exitWorkerMemory)
		}
	}
	check()
	go func() {
		t := time.NewTicker(workerWatchdogPeriod)
		defer t.Stop()
		for range t.C {
			check()
		}
	}()
}

// peakRSS is the process's peak resident set (VmHWM), in bytes (0 where
// there is no /proc).
func peakRSS() uint64 { return procStatusBytes("VmHWM:") }

// procStatusBytes reads a "kB" field of /proc/self/status, in bytes (0 when
// it cannot).
func procStatusBytes(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
