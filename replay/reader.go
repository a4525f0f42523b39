package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxLineBytes is the longest audit event line read. kube-apiserver's
// events are a few KiB at level Metadata and at most a few MiB at level
// RequestResponse (the request body limit is 3 MiB); a longer line is
// counted as unrebuildable (ReasonLineTooLong) and skipped, never read into
// memory whole.
const MaxLineBytes = 4 << 20

// batchBytes is the size of the line batches the reader hands to the
// workers: large enough that channel operations cost nothing per line,
// small enough that (workers+2) batches in flight stay a few MiB.
const batchBytes = 1 << 20

// line is one line of a batch: its bytes in batch.data, its position.
type line struct {
	start, end int
	// number is the line's 1-based number in its file.
	number int
	// tooLong: the line exceeded MaxLineBytes; data holds nothing of it.
	tooLong bool
}

// batch is consecutive lines of one file.
type batch struct {
	file  int
	seq   int
	data  []byte
	lines []line
}

// gzipMagic starts every gzip stream (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// openLog opens path, decompressing it when it starts with gzip's magic
// bytes, whatever its name.
//
// Errors: the file cannot be opened or read, or its gzip header is invalid.
func openLog(path string) (io.Reader, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open audit log: %w", err)
	}
	br := bufio.NewReaderSize(f, 64<<10)
	magic, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, nil, fmt.Errorf("failed to read audit log %s: %w", path, err)
	}
	if bytes.Equal(magic, gzipMagic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("audit log %s starts like gzip but is not: %w", path, err)
		}
		return zr, f, nil
	}
	return br, f, nil
}

// readLogs reads the files in order and sends their lines in batches to out,
// taking empty batches from free (so that memory is bounded by the batches
// in circulation). It closes out when done.
//
// Errors: a file that cannot be opened or read (gzip corruption included),
// naming the file.
func readLogs(ctx context.Context, files []string, free <-chan *batch, out chan<- *batch) error {
	defer close(out)
	seq := 0
	for i, path := range files {
		if err := readLog(ctx, i, path, &seq, free, out); err != nil {
			return err
		}
	}
	return nil
}

func readLog(ctx context.Context, fileIdx int, path string, seq *int, free <-chan *batch, out chan<- *batch) error {
	r, closer, err := openLog(path)
	if err != nil {
		return err
	}
	defer closer.Close()
	br := bufio.NewReaderSize(r, MaxLineBytes+1)
	var b *batch
	next := func() error {
		select {
		case b = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.file, b.seq, b.data, b.lines = fileIdx, *seq, b.data[:0], b.lines[:0]
		*seq++
		return nil
	}
	flush := func() error {
		if b == nil || len(b.lines) == 0 {
			return nil
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		b = nil
		return nil
	}
	number := 0
	for {
		data, err := br.ReadSlice('\n')
		tooLong := false
		if errors.Is(err, bufio.ErrBufferFull) {
			// Skip the rest of the line without holding it.
			tooLong = true
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			data = nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("failed to read audit log %s after line %d: %w", path, number, err)
		}
		if len(data) > 0 || tooLong {
			number++
			if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 || tooLong {
				if b == nil || len(b.data)+len(trimmed) > batchBytes {
					if ferr := flush(); ferr != nil {
						return ferr
					}
					if nerr := next(); nerr != nil {
						return nerr
					}
				}
				start := len(b.data)
				b.data = append(b.data, trimmed...)
				b.lines = append(b.lines, line{start: start, end: len(b.data), number: number, tooLong: tooLong})
			}
		}
		if errors.Is(err, io.EOF) {
			return flush()
		}
	}
}
