package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Report is the result of Run. Its JSON form (`deputy replay -o json`) is
// stable: fields are only ever added.
type Report struct {
	// Baseline and Policy describe what was compared; the caller fills
	// Policy and, with a baseline policy, Baseline. RBAC says which RBAC the
	// chain assumed.
	Baseline string   `json:"baseline"`
	Policy   string   `json:"policy"`
	RBAC     string   `json:"rbac,omitempty"`
	Files    []string `json:"files"`
	Totals   Totals   `json:"totals"`
	// Unrebuildable are the events not replayed, by reason, each with its
	// earliest example.
	Unrebuildable []Skipped `json:"unrebuildable"`
	// NewlyDenied and NewlyAllowed are the changes, grouped, largest first.
	NewlyDenied  []Group `json:"newlyDenied"`
	NewlyAllowed []Group `json:"newlyAllowed"`
}

// Totals count events. EventsRead = OtherStages + Unrebuildable +
// NotSentToDeputy + DecidedOutsideDeputy + Replayed, and Replayed =
// Unchanged + NewlyDenied + NewlyAllowed.
type Totals struct {
	EventsRead int64 `json:"eventsRead"`
	// OtherStages are RequestReceived and ResponseStarted events: a request
	// is replayed from its ResponseComplete (or Panic) event.
	OtherStages   int64 `json:"otherStages"`
	Unrebuildable int64 `json:"unrebuildable"`
	// NotSentToDeputy: no check of the request matched a deputy webhook's
	// matchConditions; no policy changes it.
	NotSentToDeputy int64 `json:"notSentToDeputy"`
	// DecidedOutsideDeputy: system:masters or the Node authorizer decided.
	DecidedOutsideDeputy int64 `json:"decidedOutsideDeputy"`
	Replayed             int64 `json:"replayed"`
	Unchanged            int64 `json:"unchanged"`
	NewlyDenied          int64 `json:"newlyDenied"`
	NewlyAllowed         int64 `json:"newlyAllowed"`
}

// Skipped counts the events not replayed for one reason.
type Skipped struct {
	Reason  string   `json:"reason"`
	Count   int64    `json:"count"`
	Example *Example `json:"example,omitempty"`
}

// Group is the changed requests of one identity, verb and resource.
type Group struct {
	// User is the identity the request ran as: the impersonated one when
	// impersonated; Impersonator then names who impersonated. Other marks
	// the group counting the changes beyond Options.MaxGroups (its other
	// fields are empty).
	User         string `json:"user"`
	Impersonator string `json:"impersonator,omitempty"`
	Verb         string `json:"verb"`
	// Resource is resource[.group][/subresource], or the path of a
	// non-resource request.
	Resource string `json:"resource"`
	Other    bool   `json:"other,omitempty"`
	Count    int64  `json:"count"`
	// Check is the check that decided under the new policy ("request" or
	// "impersonation"), Reason its reason; BaselineReason the baseline's,
	// of the earliest example.
	Check          string    `json:"check"`
	Reason         string    `json:"reason"`
	BaselineReason string    `json:"baselineReason,omitempty"`
	Examples       []Example `json:"examples"`
}

// Example is one event of a group.
type Example struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	AuditID   string `json:"auditID,omitempty"`
	Time      string `json:"time,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// pos orders examples: the earliest are kept.
	pos pos
}

// pos is a line's place in the logs.
type pos struct{ file, line int }

func (p pos) before(q pos) bool { return p.file < q.file || p.file == q.file && p.line < q.line }

type groupKey struct{ user, impersonator, verb, resource string }

// accumulator is one worker's share of the report; merged at the end.
type accumulator struct {
	examples, maxGroups int
	totals              Totals
	skipped             map[string]*Skipped
	denied, allowed     *groups
}

type groups struct {
	m     map[groupKey]*Group
	other *Group
}

func newAccumulator(o Options) *accumulator {
	return &accumulator{examples: o.Examples, maxGroups: o.MaxGroups, skipped: map[string]*Skipped{},
		denied: &groups{m: map[groupKey]*Group{}}, allowed: &groups{m: map[groupKey]*Group{}}}
}

func example(p pos, ev *event) Example {
	e := Example{Line: p.line, pos: p}
	if ev != nil {
		e.AuditID, e.Time = string(ev.AuditID), ev.RequestReceivedTimestamp
		if ev.ObjectRef != nil {
			e.Namespace, e.Name = ev.ObjectRef.Namespace, ev.ObjectRef.Name
		}
	}
	return e
}

func (a *accumulator) skip(reason string, p pos, ev *event) {
	a.totals.Unrebuildable++
	s := a.skipped[reason]
	if s == nil {
		s = &Skipped{Reason: reason}
		a.skipped[reason] = s
	}
	s.Count++
	if s.Example == nil || p.before(s.Example.pos) {
		e := example(p, ev)
		s.Example = &e
	}
}

func (a *accumulator) change(gs *groups, r *Request, newOut, base *Outcome, p pos, ev *event) {
	attrs := &r.Attributes
	k := groupKey{user: attrs.User.GetName(), verb: attrs.Verb, resource: attrs.Path}
	if r.Requestor != nil {
		k.impersonator = r.Requestor.GetName()
	}
	if attrs.ResourceRequest {
		k.resource = resourceString(attrs.APIGroup, attrs.Resource, attrs.Subresource)
	}
	g := gs.m[k]
	if g == nil {
		if len(gs.m) >= a.maxGroups {
			if gs.other == nil {
				gs.other = &Group{Other: true}
			}
			gs.other.Count++
			return
		}
		g = &Group{User: k.user, Impersonator: k.impersonator, Verb: k.verb, Resource: k.resource}
		gs.m[k] = g
	}
	g.Count++
	a.addExample(g, example(p, ev), newOut, base)
}

// addExample keeps the earliest examples; the group's reasons are those of
// its earliest example.
func (a *accumulator) addExample(g *Group, e Example, newOut, base *Outcome) {
	if len(g.Examples) == a.examples && !e.pos.before(g.Examples[len(g.Examples)-1].pos) {
		return
	}
	i, _ := slices.BinarySearchFunc(g.Examples, e, func(x, y Example) int {
		if x.pos.before(y.pos) {
			return -1
		}
		return 1
	})
	if i == 0 && newOut != nil {
		g.Check, g.Reason, g.BaselineReason = newOut.Check, newOut.Reason, base.Reason
	}
	g.Examples = slices.Insert(g.Examples, i, e)
	if len(g.Examples) > a.examples {
		g.Examples = g.Examples[:a.examples]
	}
}

// merge adds b into a.
func (a *accumulator) merge(b *accumulator) {
	t, u := &a.totals, b.totals
	t.EventsRead += u.EventsRead
	t.OtherStages += u.OtherStages
	t.Unrebuildable += u.Unrebuildable
	t.NotSentToDeputy += u.NotSentToDeputy
	t.DecidedOutsideDeputy += u.DecidedOutsideDeputy
	t.Replayed += u.Replayed
	t.Unchanged += u.Unchanged
	t.NewlyDenied += u.NewlyDenied
	t.NewlyAllowed += u.NewlyAllowed
	for r, s := range b.skipped {
		mine := a.skipped[r]
		if mine == nil {
			a.skipped[r] = s
			continue
		}
		mine.Count += s.Count
		if s.Example != nil && (mine.Example == nil || s.Example.pos.before(mine.Example.pos)) {
			mine.Example = s.Example
		}
	}
	a.mergeGroups(a.denied, b.denied)
	a.mergeGroups(a.allowed, b.allowed)
}

func (a *accumulator) mergeGroups(into, from *groups) {
	if from.other != nil {
		if into.other == nil {
			into.other = &Group{Other: true}
		}
		into.other.Count += from.other.Count
	}
	// In key order, so that which groups overflow does not depend on map
	// order.
	keys := slices.SortedFunc(maps.Keys(from.m), func(x, y groupKey) int {
		return cmp.Or(cmp.Compare(x.user, y.user), cmp.Compare(x.impersonator, y.impersonator), cmp.Compare(x.verb, y.verb), cmp.Compare(x.resource, y.resource))
	})
	for _, k := range keys {
		g := from.m[k]
		mine := into.m[k]
		if mine == nil {
			if len(into.m) >= a.maxGroups {
				if into.other == nil {
					into.other = &Group{Other: true}
				}
				into.other.Count += g.Count
				continue
			}
			into.m[k] = g
			continue
		}
		mine.Count += g.Count
		for i, e := range g.Examples {
			var out *Outcome
			if i == 0 {
				out = &Outcome{Check: g.Check, Reason: g.Reason}
			}
			a.addExample(mine, e, out, &Outcome{Reason: g.BaselineReason})
		}
	}
}

// report renders the accumulator, sorted: groups by count (largest first)
// then identity, verb and resource; reasons by count.
func (a *accumulator) report(files []string) *Report {
	r := &Report{Files: files, Totals: a.totals, Unrebuildable: []Skipped{}}
	for _, s := range a.skipped {
		r.Unrebuildable = append(r.Unrebuildable, *s)
	}
	slices.SortFunc(r.Unrebuildable, func(x, y Skipped) int { return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Reason, y.Reason)) })
	list := func(gs *groups) []Group {
		out := []Group{}
		for _, g := range gs.m {
			for i := range g.Examples {
				g.Examples[i].File = files[g.Examples[i].pos.file]
			}
			out = append(out, *g)
		}
		slices.SortFunc(out, func(x, y Group) int {
			return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.User, y.User), cmp.Compare(x.Impersonator, y.Impersonator),
				cmp.Compare(x.Verb, y.Verb), cmp.Compare(x.Resource, y.Resource))
		})
		if gs.other != nil {
			out = append(out, *gs.other)
		}
		return out
	}
	for i := range r.Unrebuildable {
		if e := r.Unrebuildable[i].Example; e != nil {
			e.File = files[e.pos.file]
		}
	}
	r.NewlyDenied, r.NewlyAllowed = list(a.denied), list(a.allowed)
	return r
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people: what was compared, the totals,
// the unrebuildable events, then the changes with their examples.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "baseline: %s\nnew:      %s\n", r.Baseline, r.Policy)
	if r.RBAC != "" {
		fmt.Fprintf(&b, "RBAC:     %s\n", r.RBAC)
	}
	t := r.Totals
	fmt.Fprintf(&b, "\nevents read %d: replayed %d (unchanged %d, newly denied %d, newly allowed %d), not sent to deputy %d, decided outside deputy %d, unrebuildable %d, other stages %d\n",
		t.EventsRead, t.Replayed, t.Unchanged, t.NewlyDenied, t.NewlyAllowed, t.NotSentToDeputy, t.DecidedOutsideDeputy, t.Unrebuildable, t.OtherStages)
	if len(r.Unrebuildable) > 0 {
		b.WriteString("\nUNREBUILDABLE\n")
		for _, s := range r.Unrebuildable {
			fmt.Fprintf(&b, "  %d  %s", s.Count, s.Reason)
			if s.Example != nil {
				fmt.Fprintf(&b, " (e.g. %s)", describeExample(s.Example))
			}
			b.WriteString("\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, part := range []struct {
		title  string
		groups []Group
	}{{"NEWLY DENIED", r.NewlyDenied}, {"NEWLY ALLOWED", r.NewlyAllowed}} {
		if len(part.groups) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", part.title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COUNT\tUSER\tVERB\tRESOURCE\tCHECK\tREASON")
		for _, g := range part.groups {
			if g.Other {
				fmt.Fprintf(tw, "%d\t(other groups)\t\t\t\t\n", g.Count)
				continue
			}
			u := g.User
			if g.Impersonator != "" {
				u += " (impersonated by " + g.Impersonator + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", g.Count, u, g.Verb, g.Resource, g.Check, oneLine(g.Reason))
			for _, e := range g.Examples {
				fmt.Fprintf(tw, "\t\t\t\t\te.g. %s\n", describeExample(&e))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func describeExample(e *Example) string {
	s := fmt.Sprintf("%s:%d", e.File, e.Line)
	if e.AuditID != "" {
		s += " auditID " + e.AuditID
	}
	if e.Time != "" {
		s += " at " + e.Time
	}
	switch {
	case e.Namespace != "" && e.Name != "":
		s += " " + e.Namespace + "/" + e.Name
	case e.Namespace != "" || e.Name != "":
		s += " " + e.Namespace + e.Name
	}
	return s
}

// oneLine keeps a reason on one table row, at most 200 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}
