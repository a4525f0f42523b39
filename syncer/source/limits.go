package source

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"deputy.dev/deputy/syncer/source/limit"

	"deputy.dev/deputy/syncer/source/localrepo"
)

// Limits bound one operation: what a render may read and produce, what a
// fetch may receive, and how long the whole operation may take. Zero fields
// take their default (DefaultLimits). Exceeding a limit fails the operation
// with a *LimitError naming the configuration field.
type Limits struct {
	// MaxFileBytes bounds one file read from a repository (checked against
	// the blob's declared size before reading), and one object received by a
	// fetch (go-git's pack indexer holds each object in memory).
	MaxFileBytes int64
	// MaxRenderBytes bounds all bytes one render reads (files and trees),
	// and the size of the objects it produces as deputy holds them
	// (decodedSize: their JSON's bytes plus 48 per value).
	MaxRenderBytes int64
	// MaxFiles bounds the files one render reads.
	MaxFiles int
	// MaxObjects bounds the objects one render produces.
	MaxObjects int
	// MaxRenderMemory bounds the memory of one render: every render
	// (kustomize or plain manifests) runs in a render worker (a child
	// process, see render_worker.go) that is stopped when its Go memory
	// (heap, stacks and runtime metadata, as GOMEMLIMIT counts it) exceeds
	// this.
	MaxRenderMemory int64
	// MaxFetchBytes bounds the bytes received from a Git server by one
	// fetch, and the total inflated size of the objects it receives.
	MaxFetchBytes int64
	// MaxFetchObjects bounds the objects one fetch receives (the count a
	// pack declares in its header, checked before go-git indexes any):
	// go-git's pack indexer keeps about 0.5 KiB per object in memory.
	MaxFetchObjects int
	// OperationTimeout bounds one operation of the sync engine
	// (syncer.Engine.Run, DeleteResources), and one ResolveRevision.
	OperationTimeout time.Duration
}

// The configuration fields of the limits, as error messages name them.
const (
	FieldMaxFileBytes     = limit.FieldMaxFileBytes
	FieldMaxRenderBytes   = limit.FieldMaxRenderBytes
	FieldMaxFiles         = limit.FieldMaxFiles
	FieldMaxObjects       = limit.FieldMaxObjects
	FieldMaxRenderMemory  = limit.FieldMaxRenderMemory
	FieldMaxFetchBytes    = limit.FieldMaxFetchBytes
	FieldMaxFetchObjects  = limit.FieldMaxFetchObjects
	FieldOperationTimeout = limit.FieldOperationTimeout
)

// DefaultMaxRenderMemory is the default of Limits.MaxRenderMemory: more
// than twice what a large real application takes (3,000 Deployments and 30
// CRDs of 100 KB through kustomize: 380 MB; docs/benchmarks.md), far below
// what hostile input takes (YAML aliases: without bound).
const DefaultMaxRenderMemory = 1 << 30

// DefaultMaxFetchObjects is the default of Limits.MaxFetchObjects: about
// 275 MB of go-git's indexer state while the fetch runs (0.55 KB per
// object, measured), and a history of some 70,000 commits, which a GitOps
// repository rarely has.
const DefaultMaxFetchObjects = 500000

// DefaultLimits are the defaults of config sync.limits: far above what a
// real application needs, low enough that one operation cannot take deputy's
// memory or a sync worker forever.
func DefaultLimits() Limits {
	return Limits{
		MaxFileBytes:     32 << 20,
		MaxRenderBytes:   256 << 20,
		MaxFiles:         20000,
		MaxObjects:       10000,
		MaxRenderMemory:  DefaultMaxRenderMemory,
		MaxFetchBytes:    2 << 30,
		MaxFetchObjects:  DefaultMaxFetchObjects,
		OperationTimeout: 30 * time.Minute,
	}
}

// WithDefaults fills zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxRenderBytes <= 0 {
		l.MaxRenderBytes = d.MaxRenderBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = d.MaxObjects
	}
	if l.MaxRenderMemory <= 0 {
		l.MaxRenderMemory = d.MaxRenderMemory
	}
	if l.MaxFetchBytes <= 0 {
		l.MaxFetchBytes = d.MaxFetchBytes
	}
	if l.MaxFetchObjects <= 0 {
		l.MaxFetchObjects = d.MaxFetchObjects
	}
	if l.OperationTimeout <= 0 {
		l.OperationTimeout = d.OperationTimeout
	}
	return l
}

// LimitError is a limit an operation exceeded (limit.Error: its Field,
// What and Limit). Its message names the configuration field to raise (or
// the input to shrink).
type LimitError = limit.Error

// bytesString renders n as a binary quantity ("32Mi") as the configuration
// writes it.
func bytesString(n int64) string { return limit.Bytes(n) }

// renderBudget counts what one render (in a render worker) reads and
// produces against Limits. It is safe for concurrent use. ctx is the
// operation's: a read after it ended fails, so that a build stops at its next
// read (and deputy kills the worker at that deadline anyway).
type renderBudget struct {
	ctx    context.Context
	limits Limits

	mu    sync.Mutex
	bytes int64
	files int
	// exceeded is the first limit exceeded: kustomize flattens the errors
	// of its reads into strings, so the render asks the budget.
	exceeded *LimitError
}

func newRenderBudget(ctx context.Context, l Limits) *renderBudget {
	return &renderBudget{ctx: ctx, limits: l.WithDefaults()}
}

// file charges one file of size bytes (its declared size, before reading).
func (b *renderBudget) file(name string, size int64) error {
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if size > b.limits.MaxFileBytes {
		return b.exceed(&LimitError{Field: FieldMaxFileBytes, What: fmt.Sprintf("file %q (%s)", name, bytesString(size)), Limit: bytesString(b.limits.MaxFileBytes)})
	}
	if b.files+1 > b.limits.MaxFiles {
		return b.exceed(&LimitError{Field: FieldMaxFiles, What: fmt.Sprintf("the render's file count (reading %q, file %d)", name, b.files+1), Limit: fmt.Sprint(b.limits.MaxFiles)})
	}
	if b.bytes+size > b.limits.MaxRenderBytes {
		return b.exceed(&LimitError{Field: FieldMaxRenderBytes, What: fmt.Sprintf("the bytes the render read (%s with %q)", bytesString(b.bytes+size), name), Limit: bytesString(b.limits.MaxRenderBytes)})
	}
	b.files++
	b.bytes += size
	return nil
}

// metadata charges a tree (or another object that is not a file) of size
// bytes to the render's bytes; it is bounded per object like a file.
func (b *renderBudget) metadata(what string, size int64) error {
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if size > b.limits.MaxFileBytes {
		return b.exceed(&LimitError{Field: FieldMaxFileBytes, What: fmt.Sprintf("%s (%s)", what, bytesString(size)), Limit: bytesString(b.limits.MaxFileBytes)})
	}
	if b.bytes+size > b.limits.MaxRenderBytes {
		return b.exceed(&LimitError{Field: FieldMaxRenderBytes, What: fmt.Sprintf("the bytes the render read (%s with %s)", bytesString(b.bytes+size), what), Limit: bytesString(b.limits.MaxRenderBytes)})
	}
	b.bytes += size
	return nil
}

// objects checks that n rendered objects are within MaxObjects.
func (b *renderBudget) objects(n int) error {
	if n > b.limits.MaxObjects {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.exceed(&LimitError{Field: FieldMaxObjects, What: fmt.Sprintf("the render's %d objects", n), Limit: fmt.Sprint(b.limits.MaxObjects)})
	}
	return nil
}

// exceed records the first limit exceeded (b.mu held) and returns e.
func (b *renderBudget) exceed(e *LimitError) error {
	if b.exceeded == nil {
		b.exceeded = e
	}
	return e
}

// err is the first limit the render exceeded, nil if none.
func (b *renderBudget) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exceeded == nil {
		return nil
	}
	return b.exceeded
}

// isLimitError reports whether err is (or wraps) a *LimitError.
func isLimitError(err error) bool {
	var le *LimitError
	return errors.As(err, &le)
}

// FieldLocalRepositories is the configuration field that allows local
// repositories; refusals name it.
const FieldLocalRepositories = localrepo.Field
