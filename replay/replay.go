package replay

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Defaults of Options.
const (
	DefaultExamples  = 3
	DefaultMaxGroups = 10000
)

// Options configure Run.
type Options struct {
	// Files are the audit logs, read in order; plain or gzip.
	Files []string
	// New decides under the candidate policy. Required.
	New Decider
	// Baseline decides under the current policy; nil means the decision each
	// event records (its authorization.k8s.io/decision annotation).
	Baseline Decider
	// Examples is the number of example events kept per group (the
	// earliest in the logs); 0 means DefaultExamples.
	Examples int
	// MaxGroups bounds the groups of each of newly denied and newly
	// allowed; further changes are counted in one "other" group. 0 means
	// DefaultMaxGroups.
	MaxGroups int
	// Workers decode and decide in parallel; 0 means GOMAXPROCS.
	Workers int
}

// decisionCacheSize bounds each worker's memo of decisions: audit logs
// repeat the same few thousand checks, and deciding one (CEL
// matchConditions, the gate, RBAC) costs more than decoding its event. The
// memo is cleared when full, so memory stays bounded.
const decisionCacheSize = 1 << 15

// Run replays the audit logs and returns the report. Memory is bounded by
// the batches in flight, the workers' decision memos and the report's
// bounded groups, whatever the logs' size.
//
// Errors: missing deciders, a log that cannot be opened or read (named),
// ctx's error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.New == nil {
		return nil, errors.New("replay: no decider for the new policy")
	}
	if len(o.Files) == 0 {
		return nil, errors.New("replay: no audit log given")
	}
	if o.Examples <= 0 {
		o.Examples = DefaultExamples
	}
	if o.MaxGroups <= 0 {
		o.MaxGroups = DefaultMaxGroups
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan *batch, o.Workers*2+2)
	for range cap(free) {
		free <- &batch{data: make([]byte, 0, batchBytes)}
	}
	work := make(chan *batch)
	accs := make([]*accumulator, o.Workers)
	var wg sync.WaitGroup
	for i := range accs {
		accs[i] = newAccumulator(o)
		w := &worker{o: o, acc: accs[i], newD: newMemo(o.New)}
		if o.Baseline != nil {
			w.baseD = newMemo(o.Baseline)
		}
		wg.Go(func() {
			for b := range work {
				w.batch(ctx, b)
				free <- b
			}
		})
	}
	// readLogs closes work whatever happens, which ends the workers; on an
	// error, cancel makes them skip the batches still queued.
	readErr := readLogs(ctx, o.Files, free, work)
	if readErr != nil {
		cancel()
	}
	wg.Wait()
	if readErr != nil {
		return nil, readErr
	}
	acc := accs[0]
	for _, a := range accs[1:] {
		acc.merge(a)
	}
	rep := acc.report(o.Files)
	if o.Baseline == nil {
		rep.Baseline = "the decision each event records (" + DecisionAnnotation + ")"
	}
	return rep, nil
}

type worker struct {
	o           Options
	acc         *accumulator
	newD, baseD Decider
	ev          event
}

func (w *worker) batch(ctx context.Context, b *batch) {
	for _, l := range b.lines {
		if ctx.Err() != nil {
			return
		}
		w.line(ctx, pos{file: b.file, line: l.number}, b.data[l.start:l.end], l.tooLong)
	}
}

// line replays one line.
func (w *worker) line(ctx context.Context, p pos, data []byte, tooLong bool) {
	a := w.acc
	a.totals.EventsRead++
	if tooLong {
		a.skip(ReasonLineTooLong, p, nil)
		return
	}
	ev := &w.ev
	if reason, ok := decodeEvent(data, ev); !ok {
		a.skip(reason, p, nil)
		return
	}
	if !completeStage(ev) {
		a.totals.OtherStages++
		return
	}
	decision, recorded := ev.Annotations[DecisionAnnotation]
	if !recorded && ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 {
		a.skip(ReasonDeniedBefore, p, ev)
		return
	}
	r, reason := rebuild(ev)
	if r == nil {
		a.skip(reason, p, ev)
		return
	}
	newOut := DecideRequest(ctx, w.newD, r)
	var base Outcome
	if w.baseD != nil {
		base = DecideRequest(ctx, w.baseD, r)
	}
	switch {
	case newOut.Outside && (w.baseD == nil || base.Outside):
		a.totals.DecidedOutsideDeputy++
		return
	case !newOut.Deputy && (w.baseD == nil || !base.Deputy):
		a.totals.NotSentToDeputy++
		return
	}
	if w.baseD == nil {
		switch decision {
		case "allow":
			base = Outcome{Allowed: true, Reason: ev.Annotations[ReasonAnnotation]}
		case "forbid":
			base = Outcome{Reason: ev.Annotations[ReasonAnnotation]}
		default:
			a.skip(ReasonNoDecision, p, ev)
			return
		}
	}
	a.totals.Replayed++
	switch {
	case base.Allowed == newOut.Allowed:
		a.totals.Unchanged++
	case base.Allowed:
		a.totals.NewlyDenied++
		a.change(a.denied, r, &newOut, &base, p, ev)
	default:
		a.totals.NewlyAllowed++
		a.change(a.allowed, r, &newOut, &base, p, ev)
	}
}

// memo remembers a Decider's decisions per check (bounded, cleared when
// full). Deciders are deterministic for a fixed policy, so a remembered
// decision is the decision.
type memo struct {
	d     Decider
	cache map[string]Decision
	key   strings.Builder
}

func newMemo(d Decider) *memo {
	return &memo{d: d, cache: make(map[string]Decision, decisionCacheSize)}
}

// Decide returns the remembered decision of a, deciding it the first time.
func (m *memo) Decide(ctx context.Context, a authorizer.Attributes) Decision {
	k := &m.key
	k.Reset()
	u := a.GetUser()
	for _, s := range []string{u.GetName(), u.GetUID(), a.GetVerb(), a.GetAPIGroup(), a.GetAPIVersion(), a.GetResource(), a.GetSubresource(),
		a.GetNamespace(), a.GetName(), a.GetPath()} {
		k.WriteString(s)
		k.WriteByte(0)
	}
	if a.IsResourceRequest() {
		k.WriteByte(1)
	}
	for _, g := range u.GetGroups() {
		k.WriteString(g)
		k.WriteByte(1)
	}
	extra := u.GetExtra()
	for _, ek := range slices.Sorted(maps.Keys(extra)) {
		k.WriteString(ek)
		k.WriteByte(2)
		for _, v := range extra[ek] {
			k.WriteString(v)
			k.WriteByte(3)
		}
	}
	if d, ok := m.cache[k.String()]; ok {
		return d
	}
	d := m.d.Decide(ctx, a)
	if len(m.cache) >= decisionCacheSize {
		clear(m.cache)
	}
	m.cache[k.String()] = d
	return d
}
