// Package gitfetch bounds what a Git fetch over HTTP(S) may make deputy
// hold: it installs, once per process, the HTTP client go-git uses for
// http and https, which counts every response body of a fetch against the
// Budget carried in the request's context and inspects upload-pack results
// object by object before go-git indexes them (see the comment below).
//
// It must not decide which URL is fetched or with which credential
// (package source does), and must not let a pack past a limit reach
// go-git: each exceeded limit is a *limit.Error naming its field.
package gitfetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"deputy.dev/deputy/syncer/source/limit"
)

// This file bounds what a fetch may make deputy hold. go-git's fetch writes
// the received pack to disk and indexes it (dotgit.PackWriter →
// packfile.Parser); the parser's resolveDeltas then reads every object of
// the pack whole into a bytes.Buffer sized by the object's declared length
// (measured: a 1 GiB blob of zeros, 1 MB compressed, took the fetch to
// 1.06 GB RSS, all of it one bytes.Buffer.Grow in Parser.resolveDeltas).
// go-git v5 has no option to refuse large objects, and its FetchOptions
// carry no partial-clone filter, so deputy inspects the pack as it arrives:
// the HTTP client go-git uses (installed once for http and https) passes
// every response body of a fetch through fetchBody, which counts the bytes
// against MaxFetchBytes and, for an upload-pack result, runs go-git's own
// packfile.Scanner over a copy of the pack to read each object's declared
// size (for deltas: the target size in the delta's header) before the
// bytes reach go-git. An object over MaxFileBytes, or objects totalling
// more than MaxFetchBytes, fail the read, so the parser never gets a
// complete pack and never allocates for that object. A pack declaring more
// than MaxFetchObjects objects in its header fails the same way, before
// go-git reads the header (its indexer keeps about 0.5 KiB per object
// until the fetch ends, whatever the objects' sizes).

// Limits bound one fetch (source.Limits' fields of the same names).
type Limits struct {
	// MaxFetchBytes bounds the bytes received, and the total inflated size
	// of the objects received.
	MaxFetchBytes int64
	// MaxFileBytes bounds one object's size.
	MaxFileBytes int64
	// MaxFetchObjects bounds the objects a pack declares.
	MaxFetchObjects int
}

// Budget is the budget of one fetch (all its HTTP requests), carried in
// the request context (WithBudget).
type Budget struct {
	limits   Limits
	received atomic.Int64
	inflated atomic.Int64

	mu        sync.Mutex
	violation error
}

type BudgetKey struct{}

// NewBudget returns the budget of one fetch within l.
func NewBudget(l Limits) *Budget {
	return &Budget{limits: l}
}

// WithBudget returns ctx carrying b: go-git passes the fetch's context
// to its HTTP requests, and so to fetchTransport.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, BudgetKey{}, b)
}

// exceeded records the first limit the fetch exceeded and returns it.
func (b *Budget) exceeded(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.violation == nil {
		b.violation = err
	}
	return b.violation
}

// Err is the limit the fetch exceeded, nil if none: go-git wraps (or
// replaces) the error a body returns, so the fetch asks the budget.
func (b *Budget) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.violation
}

func (b *Budget) receive(n int) error {
	if total := b.received.Add(int64(n)); total > b.limits.MaxFetchBytes {
		return b.exceeded(&limit.Error{Field: limit.FieldMaxFetchBytes, What: fmt.Sprintf("the bytes received by the fetch (more than %s)", limit.Bytes(total)), Limit: limit.Bytes(b.limits.MaxFetchBytes)})
	}
	return nil
}

// objectCount checks the number of objects a pack declares in its header
// (the 12 bytes before the first object): go-git's indexer keeps state for
// every object of the pack until the fetch ends, so a pack of many tiny
// objects costs memory that no byte limit sees. The count is known before
// go-git receives the header, so a refused pack is never indexed.
func (b *Budget) objectCount(n uint32) error {
	if int64(n) > int64(b.limits.MaxFetchObjects) {
		return b.exceeded(&limit.Error{Field: limit.FieldMaxFetchObjects, What: fmt.Sprintf("the fetched pack's object count (%d)", n), Limit: fmt.Sprint(b.limits.MaxFetchObjects)})
	}
	return nil
}

// object checks one object of the pack by its declared (inflated) size;
// total adds it to the total size of the fetched objects (a delta's own
// payload is checked, but only its target counts in the total).
func (b *Budget) object(kind string, size int64, total bool) error {
	if size > b.limits.MaxFileBytes {
		return b.exceeded(&limit.Error{Field: limit.FieldMaxFileBytes, What: fmt.Sprintf("a %s of %s in the fetched pack", kind, limit.Bytes(size)), Limit: limit.Bytes(b.limits.MaxFileBytes)})
	}
	if !total {
		return nil
	}
	if total := b.inflated.Add(size); total > b.limits.MaxFetchBytes {
		return b.exceeded(&limit.Error{Field: limit.FieldMaxFetchBytes, What: fmt.Sprintf("the total size of the fetched objects (more than %s)", limit.Bytes(total)), Limit: limit.Bytes(b.limits.MaxFetchBytes)})
	}
	return nil
}

var installOnce sync.Once

// baseHTTPTransport is net/http's default transport as it was when the
// process started, before anything wrapped http.DefaultTransport.
var baseHTTPTransport = http.DefaultTransport.(*http.Transport).Clone()

// Install installs, for go-git's http and https protocols, an
// HTTP client whose responses are bounded by the fetch budget in the
// request's context. go-git chooses a transport by scheme from a
// process-wide table (client.InstallProtocol), so this is done once per
// process; requests without a budget pass through unchanged. The base
// transport is a clone of net/http's default as the process started, so that the
// kustomize remote-loading bounds (which wrap http.DefaultTransport) never
// apply to fetches. Redirects keep go-git's policy: followed only for the
// initial ref discovery, credentials dropped when the origin changes, never
// from https to http.
func Install() {
	installOnce.Do(func() {
		c := githttp.NewClientWithOptions(&http.Client{Transport: &fetchTransport{base: baseHTTPTransport.Clone()}}, &githttp.ClientOptions{RedirectPolicy: githttp.FollowInitialRedirects})
		client.InstallProtocol("https", c)
		client.InstallProtocol("http", c)
	})
}

// fetchTransport wraps the bodies of responses to requests carrying a
// Budget.
type fetchTransport struct{ base http.RoundTripper }

func (t *fetchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	b, _ := req.Context().Value(BudgetKey{}).(*Budget)
	if err != nil || b == nil {
		return resp, err
	}
	fb := &fetchBody{body: resp.Body, budget: b}
	if strings.HasSuffix(req.URL.Path, "/git-upload-pack") && req.Method == http.MethodPost {
		fb.inspector = newPackInspector(b)
	}
	resp.Body = fb
	return resp, nil
}

// fetchBody counts a response body against the budget and feeds it, chunk
// by chunk, to the pack inspector, returning a chunk to go-git only once
// the inspector has examined it.
type fetchBody struct {
	body      io.ReadCloser
	budget    *Budget
	inspector *packInspector
	closeOnce sync.Once
}

func (f *fetchBody) Read(p []byte) (int, error) {
	if err := f.budget.Err(); err != nil {
		return 0, err
	}
	n, err := f.body.Read(p)
	if n > 0 {
		if lerr := f.budget.receive(n); lerr != nil {
			return 0, lerr
		}
		if f.inspector != nil {
			f.inspector.feed(p[:n])
		}
	}
	if err != nil && f.inspector != nil {
		// The end of the body: let the inspector finish before go-git
		// sees the end (it checks the last objects and the checksum).
		f.inspector.finish()
	}
	if verr := f.budget.Err(); verr != nil {
		return 0, verr
	}
	return n, err
}

func (f *fetchBody) Close() error {
	f.closeOnce.Do(func() {
		if f.inspector != nil {
			f.inspector.finish()
		}
	})
	return f.body.Close()
}

// packInspector reads a copy of an upload-pack response in a goroutine that
// runs in lockstep with the body: feed hands it a chunk and returns once the
// inspector has consumed everything it was given and asks for more (or has
// ended), so a size it declares over a limit is known before go-git gets
// the chunk that holds it. Nothing it reads is kept: objects are inflated
// into a discarding writer, so its memory does not depend on their size.
type packInspector struct {
	budget *Budget
	in     chan []byte
	idle   chan struct{}
	done   chan struct{}
	stop   sync.Once
}

func newPackInspector(b *Budget) *packInspector {
	pi := &packInspector{budget: b, in: make(chan []byte), idle: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(pi.done)
		r := &lockstepReader{pi: pi}
		err := inspectUploadPack(r, b)
		if err != nil && !r.eof && !errors.As(err, new(*limit.Error)) {
			// Fail closed: a pack whose objects cannot be checked is not
			// handed to go-git. (Input that ended early is go-git's to
			// report: it read the same bytes.)
			b.exceeded(fmt.Errorf("deputy could not read the pack the Git server sent (%w), so the sizes of its objects cannot be checked against %s: the fetch is refused", err, limit.FieldMaxFileBytes))
		}
		// Let a pending feed return.
		r.release()
	}()
	return pi
}

// feed gives the inspector a copy of chunk and waits until it is consumed.
func (pi *packInspector) feed(chunk []byte) {
	c := append([]byte(nil), chunk...)
	select {
	case pi.in <- c:
	case <-pi.done:
		return
	}
	select {
	case <-pi.idle:
	case <-pi.done:
	}
}

// finish ends the input and waits for the inspector to end.
func (pi *packInspector) finish() {
	pi.stop.Do(func() { close(pi.in) })
	<-pi.done
}

// lockstepReader is the inspector's side: Read signals that everything fed
// so far is consumed before it waits for the next chunk.
type lockstepReader struct {
	pi   *packInspector
	cur  []byte
	owed bool // a feed waits for the idle signal
	eof  bool
}

func (r *lockstepReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		r.release()
		c, ok := <-r.pi.in
		if !ok {
			r.eof = true
			return 0, io.EOF
		}
		r.cur, r.owed = c, true
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *lockstepReader) release() {
	if r.owed {
		r.owed = false
		r.pi.idle <- struct{}{}
	}
}

// inspectUploadPack reads an upload-pack result (protocol v0/v1): pkt-lines
// of ACK/NAK/shallow, then the pack, either raw or in side-band packets
// (band 1 pack data, 2 progress, 3 error), and checks every object's size.
// The framing is read by hand because go-git's sideband.Demuxer fills the
// caller's whole buffer before returning, which would hold back bytes from
// the scanner and break the lockstep.
func inspectUploadPack(r io.Reader, b *Budget) error {
	for {
		var head [4]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		if string(head[:]) == "PACK" {
			return inspectPack(io.MultiReader(bytes.NewReader(head[:]), r), b)
		}
		payload, err := readPktPayload(r, head)
		if err != nil {
			return err
		}
		if len(payload) > 0 && payload[0] >= 1 && payload[0] <= 3 {
			d := &sidebandReader{r: r, pending: payload}
			return inspectPack(d, b)
		}
		// ACK, NAK, shallow, unshallow lines and flushes: not pack data.
	}
}

// readPktPayload reads the payload of the pkt-line whose 4-byte length
// header is head ("0000" flush and "0001" delimiter have none).
func readPktPayload(r io.Reader, head [4]byte) ([]byte, error) {
	n, err := strconv.ParseUint(string(head[:]), 16, 16)
	if err != nil {
		return nil, fmt.Errorf("malformed pkt-line length %q in the upload-pack response", head[:])
	}
	if n < 4 {
		return nil, nil
	}
	payload := make([]byte, n-4)
	_, err = io.ReadFull(r, payload)
	return payload, err
}

// sidebandReader returns the band-1 data of side-band packets, one packet
// at a time (it never waits for more input than the next packet).
type sidebandReader struct {
	r       io.Reader
	pending []byte // the current packet, band byte included
	data    []byte
	ended   bool
}

func (s *sidebandReader) Read(p []byte) (int, error) {
	for len(s.data) == 0 {
		if s.ended {
			return 0, io.EOF
		}
		if s.pending == nil {
			var head [4]byte
			if _, err := io.ReadFull(s.r, head[:]); err != nil {
				return 0, err
			}
			payload, err := readPktPayload(s.r, head)
			if err != nil {
				return 0, err
			}
			if len(payload) == 0 {
				s.ended = true // flush: the end of the response
				continue
			}
			s.pending = payload
		}
		pkt := s.pending
		s.pending = nil
		switch pkt[0] {
		case 1:
			s.data = pkt[1:]
		case 2: // progress
		case 3:
			return 0, fmt.Errorf("the Git server reported an error: %s", strings.TrimSpace(string(pkt[1:])))
		default:
			return 0, fmt.Errorf("unknown side-band channel %d in the upload-pack response", pkt[0])
		}
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

// inspectPack scans a pack with go-git's packfile.Scanner and checks each
// object's declared size; delta objects are inflated only far enough to
// read the target size from the delta's header.
func inspectPack(r io.Reader, b *Budget) error {
	s := packfile.NewScanner(r)
	_, count, err := s.Header()
	if err != nil {
		return err
	}
	if err := b.objectCount(count); err != nil {
		return err
	}
	for range count {
		oh, err := s.NextObjectHeader()
		if err != nil {
			return err
		}
		switch oh.Type {
		case plumbing.OFSDeltaObject, plumbing.REFDeltaObject:
			if err := b.object("delta", oh.Length, false); err != nil {
				return err
			}
			w := &deltaHeaderWriter{budget: b}
			if _, _, err := s.NextObject(w); err != nil {
				return err
			}
		default:
			if err := b.object(oh.Type.String(), oh.Length, true); err != nil {
				return err
			}
			if _, _, err := s.NextObject(io.Discard); err != nil {
				return err
			}
		}
	}
	_, err = s.Checksum()
	return err
}

// deltaHeaderWriter receives an inflated delta, reads its header (source
// size, then target size, both little-endian base-128 varints: Git's
// pack-format.txt; go-git's decoder for them is unexported), checks the
// target size, and discards the rest.
type deltaHeaderWriter struct {
	budget  *Budget
	head    []byte
	checked bool
}

func (w *deltaHeaderWriter) Write(p []byte) (int, error) {
	if w.checked {
		return len(p), nil
	}
	w.head = append(w.head, p[:min(len(p), 20)]...)
	_, rest, ok := leb128(w.head)
	if !ok {
		return len(p), nil
	}
	target, _, ok := leb128(rest)
	if !ok {
		if len(w.head) >= 20 {
			return 0, errors.New("malformed delta header in the fetched pack")
		}
		return len(p), nil
	}
	w.checked = true
	if err := w.budget.object("delta target", int64(target), true); err != nil {
		return 0, err
	}
	return len(p), nil
}

// leb128 decodes one varint from b, reporting whether b held all of it.
func leb128(b []byte) (v uint64, rest []byte, ok bool) {
	var shift uint
	for i, c := range b {
		if shift > 63 {
			return 0, nil, false
		}
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			return v, b[i+1:], true
		}
	}
	return 0, nil, false
}
