package decisionlog

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
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
// are dropped: at 400 bytes an entry, 400 KiB; about 0.1 s of decisions at
// 10,000 per second.
const DefaultBuffer = 1024

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

	out     *bufio.Writer
	handler slog.Handler

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
		// machines. The level says nothing here.
		handler: slog.NewJSONHandler(out, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.LevelKey {
				return slog.Attr{}
			}
			return a
		}}),
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

// FlushInterval is how long a written line may wait in the writer's
// buffer (32 KiB) before it reaches the output: flushing per line would
// cost a write system call per decision.
const FlushInterval = 200 * time.Millisecond

// run is the writer: it encodes entries as they come into its buffer,
// writes the buffer when it is full and at least every FlushInterval, until
// Close.
func (l *Logger) run() {
	defer close(l.done)
	tick := time.NewTicker(FlushInterval)
	defer tick.Stop()
	for {
		select {
		case e := <-l.entries:
			l.write(&e)
		case <-tick.C:
			if l.out.Buffered() > 0 {
				_ = l.out.Flush()
			}
		case <-l.quit:
			for {
				select {
				case e := <-l.entries:
					l.write(&e)
				default:
					_ = l.out.Flush()
					return
				}
			}
		}
	}
}

// write encodes one line, message "decision".
func (l *Logger) write(e *Entry) {
	r := slog.NewRecord(e.Time, slog.LevelInfo, "decision", 0)
	r.AddAttrs(
		slog.String("requestID", e.RequestID),
		slog.String("user", e.User),
		slog.Any("groups", nonNil(e.Groups)),
		slog.String("uid", e.UID),
		slog.Any("extra", nonNil(e.ExtraKeys)),
		slog.String("verb", e.Verb),
	)
	if e.ResourceRequest {
		r.AddAttrs(slog.String("apiGroup", e.APIGroup), slog.String("apiVersion", e.APIVersion),
			slog.String("resource", e.Resource), slog.String("subresource", e.Subresource),
			slog.String("namespace", e.Namespace), slog.String("name", e.Name))
	} else {
		r.AddAttrs(slog.String("path", e.Path))
	}
	r.AddAttrs(
		slog.String("decision", e.Decision),
		slog.String("reason", e.Reason),
		slog.String("evaluationError", e.EvaluationError),
		slog.String("authorizer", e.Authorizer),
		slog.String("impersonation", e.Impersonation),
		slog.String("policyGeneration", e.PolicyGeneration),
		slog.Int64("durationMicros", e.Duration.Microseconds()),
	)
	if err := l.handler.Handle(context.Background(), r); err == nil && l.written != nil {
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
