package decisionlog

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Mode is which decisions are logged (logging.decisions).
type Mode string

const (
	// None logs no decision (the default).
	None Mode = "none"
	// Denied logs every decision that is not an Allow: Deny and NoOpinion.
	Denied Mode = "denied"
	// All logs every decision.
	All Mode = "all"
)

// DefaultBuffer is how many entries wait for the writer before new ones
// are dropped: at about 360 bytes an entry, 1.4 MiB; 0.2 s of decisions at
// 20,000 per second, ten times the DrainInterval.
const DefaultBuffer = 4096

// ParseMode validates a configured mode; "" is None.
//
// Errors: any value other than "", none, denied and all.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", None:
		return None, nil
	case Denied, All:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unsupported decision log mode %q: use none, denied or all", s)
}

// Entry is one decision as logged. Groups may be shared with the request
// (it is only read); ExtraKeys are the keys of the user's extra, never the
// values.
type Entry struct {
	// Time is when the decision was made.
	Time      time.Time
	RequestID string

	User      string
	UID       string
	Groups    []string
	ExtraKeys []string

	Verb        string
	APIGroup    string
	APIVersion  string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// Path is set for a non-resource request instead of the resource
	// fields.
	Path            string
	ResourceRequest bool

	// Decision is allow, deny or no_opinion.
	Decision        string
	Reason          string
	EvaluationError string
	// Authorizer is who decided (gate, rbac, default, none) and
	// Impersonation the request's impersonation shape.
	Authorizer    string
	Impersonation string
	// PolicyGeneration identifies the policy that decided (a prefix of the
	// snapshot's digest).
	PolicyGeneration string
	Duration         time.Duration
}

// Options configure New.
type Options struct {
	Mode Mode
	// SampleRate is the fraction of the decisions Mode selects that are
	// logged, in (0, 1]; 0 means 1 (every one).
	SampleRate float64
	// Output receives the lines; nil discards them.
	Output io.Writer
	// Buffer is how many entries may wait for the writer; 0 means
	// DefaultBuffer.
	Buffer int
	// Written and Dropped, if set, count lines written and entries dropped
	// because the buffer was full.
	Written, Dropped prometheus.Counter
	// Random returns numbers in [0, 1) for sampling; nil means
	// math/rand/v2's Float64 (safe for concurrent use). Tests seed their own.
	Random func() float64
}

// Logger writes decision lines. A nil *Logger (and one with mode None)
// logs nothing; its methods are safe for concurrent use.
type Logger struct {
	mode    Mode
	rate    float64
	random  func() float64
	entries chan Entry
	written prometheus.Counter
	dropped prometheus.Counter

	out *bufio.Writer
	enc *json.Encoder

	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Logger and, unless o.Mode is None, starts its writer; Close
// stops it.
func New(o Options) *Logger {
	if o.Mode == "" || o.Mode == None {
		return nil
	}
	if o.SampleRate <= 0 || o.SampleRate > 1 {
		o.SampleRate = 1
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Random == nil {
		o.Random = rand.Float64
	}
	if o.Output == nil {
		o.Output = io.Discard
	}
	out := bufio.NewWriterSize(o.Output, 32<<10)
	l := &Logger{
		mode: o.Mode, rate: o.SampleRate, random: o.Random,
		entries: make(chan Entry, o.Buffer), written: o.Written, dropped: o.Dropped,
		out: out,
		// JSON lines whatever logging.format says: decision logs are for
		// machines.
		enc:  newEncoder(out),
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go l.run()
	return l
}

// Enabled reports whether any decision may be logged: the caller then
// measures the decision's duration.
func (l *Logger) Enabled() bool { return l != nil }

// Wants reports whether a decision is to be logged: by the mode (denied:
// every decision but an Allow) and then the sample rate. It does not
// allocate.
func (l *Logger) Wants(allowed bool) bool {
	if l == nil || (allowed && l.mode == Denied) {
		return false
	}
	return l.rate >= 1 || l.random() < l.rate
}

// Log hands e to the writer without blocking; when the buffer is full, e
// is dropped and counted.
func (l *Logger) Log(e *Entry) {
	if l == nil {
		return
	}
	select {
	case l.entries <- *e:
	default:
		if l.dropped != nil {
			l.dropped.Inc()
		}
	}
}

// newEncoder writes JSON lines with <, > and & as they are (no HTML here).
func newEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// DrainInterval is how often the writer takes what the buffer holds,
// encodes it and writes it: a line reaches the output at most about this
// long after the decision. The writer is not woken per decision: a wake-up
// of a parked goroutine costs the request path more than the line itself.
const DrainInterval = 20 * time.Millisecond

// run is the writer: every DrainInterval it encodes the waiting entries
// into its 32 KiB buffer (written whenever it fills) and writes the rest,
// until Close, when it drains the buffer a last time.
func (l *Logger) run() {
	defer close(l.done)
	tick := time.NewTicker(DrainInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			l.drain()
		case <-l.quit:
			l.drain()
			return
		}
	}
}

// drain writes the entries waiting now and flushes.
func (l *Logger) drain() {
	for n := len(l.entries); n > 0; n-- {
		e := <-l.entries
		l.write(&e)
	}
	if l.out.Buffered() > 0 {
		_ = l.out.Flush()
	}
}

// line is a decision log line. Hand-written (not log/slog's JSON handler,
// which costs three times as much per line, measured with
// BenchmarkDecisionLog): encoding/json encodes it in field order. The
// resource fields and path are pointers so that a resource request always
// has apiGroup (also "", the core group) and a non-resource one only path.
type line struct {
	Time             time.Time `json:"time"`
	Msg              string    `json:"msg"`
	RequestID        string    `json:"requestID"`
	User             string    `json:"user"`
	Groups           []string  `json:"groups"`
	UID              string    `json:"uid"`
	Extra            []string  `json:"extra"`
	Verb             string    `json:"verb"`
	APIGroup         *string   `json:"apiGroup,omitempty"`
	APIVersion       *string   `json:"apiVersion,omitempty"`
	Resource         *string   `json:"resource,omitempty"`
	Subresource      *string   `json:"subresource,omitempty"`
	Namespace        *string   `json:"namespace,omitempty"`
	Name             *string   `json:"name,omitempty"`
	Path             *string   `json:"path,omitempty"`
	Decision         string    `json:"decision"`
	Reason           string    `json:"reason"`
	EvaluationError  string    `json:"evaluationError"`
	Authorizer       string    `json:"authorizer"`
	Impersonation    string    `json:"impersonation"`
	PolicyGeneration string    `json:"policyGeneration"`
	DurationMicros   int64     `json:"durationMicros"`
}

// write encodes one line, message "decision".
func (l *Logger) write(e *Entry) {
	ln := line{Time: e.Time, Msg: "decision", RequestID: e.RequestID, User: e.User, Groups: nonNil(e.Groups), UID: e.UID,
		Extra: nonNil(e.ExtraKeys), Verb: e.Verb, Decision: e.Decision, Reason: e.Reason, EvaluationError: e.EvaluationError,
		Authorizer: e.Authorizer, Impersonation: e.Impersonation, PolicyGeneration: e.PolicyGeneration,
		DurationMicros: e.Duration.Microseconds()}
	if e.ResourceRequest {
		ln.APIGroup, ln.APIVersion, ln.Resource, ln.Subresource, ln.Namespace, ln.Name =
			&e.APIGroup, &e.APIVersion, &e.Resource, &e.Subresource, &e.Namespace, &e.Name
	} else {
		ln.Path = &e.Path
	}
	// Encode appends the newline.
	if err := l.enc.Encode(&ln); err == nil && l.written != nil {
		l.written.Inc()
	}
}

// nonNil makes an absent list encode as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Close stops the writer after it has written what the buffer holds and
// flushed: call it once the server no longer serves (entries logged after
// Close are not written). It waits until ctx ends at most.
//
// Errors: ctx ended before the writer finished (the output blocks).
func (l *Logger) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() { close(l.quit) })
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("decision log writer did not finish: %w", ctx.Err())
	}
}
