package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// deciderFunc adapts a function to Decider; every check reaches deputy.
type deciderFunc func(a authorizer.Attributes) bool

func (f deciderFunc) Decide(_ context.Context, a authorizer.Attributes) Decision {
	return Decision{Allowed: f(a), Reason: "fake", Deputy: true}
}

// annMayNotList denies replay-ann's list of configmaps, allows the rest.
var annMayNotList = deciderFunc(func(a authorizer.Attributes) bool {
	return a.GetUser().GetName() != "replay-ann" || a.GetVerb() != "list"
})

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRunCountsEveryLine(t *testing.T) {
	lines := realEvents(t)
	received := strings.Replace(string(lines[1]), `"stage":"ResponseComplete"`, `"stage":"RequestReceived"`, 1)
	var plain bytes.Buffer
	for _, l := range lines {
		plain.Write(l)
		plain.WriteByte('\n')
	}
	plain.WriteString(received + "\n\n")
	plain.WriteString("garbage\n")
	plain.WriteString(strings.Repeat("x", 5<<20) + "\n")
	plain.Write(lines[1]) // after the long line, without a final newline
	// The same log twice: plain, and gzip under a name that does not say so.
	files := []string{writeFile(t, "audit.log", plain.Bytes()), writeFile(t, "audit.log.1", gz(t, plain.Bytes()))}
	rep, err := Run(t.Context(), Options{Files: files, New: annMayNotList, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	tt := rep.Totals
	// Per file: 16 events, a RequestReceived one, garbage, a long line, one more list.
	want := Totals{EventsRead: 2 * 20, OtherStages: 2, Unrebuildable: 2 * 3, Replayed: 2 * 16, NewlyDenied: 2 * 4, Unchanged: 2 * 9, NewlyAllowed: 2 * 3}
	if tt != want {
		t.Errorf("totals\n  %+v\nwant\n  %+v", tt, want)
	}
	reasons := map[string]int64{}
	for _, s := range rep.Unrebuildable {
		reasons[s.Reason] = s.Count
		if s.Example == nil || s.Example.File != files[0] {
			t.Errorf("%q: example %+v, want the earliest, in the first file", s.Reason, s.Example)
		}
	}
	if reasons[ReasonLineTooLong] != 2 || reasons[ReasonNotJSON] != 2 || reasons[ReasonDeniedBefore] != 2 {
		t.Errorf("reasons %v", reasons)
	}
	if len(rep.NewlyDenied) != 1 {
		t.Fatalf("newly denied %+v", rep.NewlyDenied)
	}
	g := rep.NewlyDenied[0]
	if g.User != "replay-ann" || g.Verb != "list" || g.Resource != "configmaps" || g.Count != 8 || g.Check != "request" {
		t.Errorf("group %+v", g)
	}
	if len(g.Examples) != DefaultExamples || g.Examples[0].Line != 2 || g.Examples[1].Line != 3 || g.Examples[2].Line != 4 || g.Examples[0].File != files[0] {
		t.Errorf("examples are not the earliest three: %+v", g.Examples)
	}
	// The forbidden requests the fake allows: ann's delete and ben's lists.
	if len(rep.NewlyAllowed) != 2 || rep.NewlyAllowed[0].User != "replay-ben" || rep.NewlyAllowed[0].Count != 4 {
		t.Errorf("newly allowed %+v", rep.NewlyAllowed)
	}
}

func TestRunWithABaselineDecider(t *testing.T) {
	f := writeFile(t, "audit.log", bytes.Join(realEvents(t), []byte("\n")))
	all := deciderFunc(func(authorizer.Attributes) bool { return true })
	rep, err := Run(t.Context(), Options{Files: []string{f}, New: annMayNotList, Baseline: all})
	if err != nil {
		t.Fatal(err)
	}
	// The baseline allows everything: only ann's three lists change.
	if rep.Totals.NewlyDenied != 3 || rep.Totals.NewlyAllowed != 0 || rep.Totals.Replayed != 15 || rep.Totals.Unrebuildable != 1 {
		t.Errorf("totals %+v", rep.Totals)
	}
	if rep.NewlyDenied[0].BaselineReason != "fake" {
		t.Errorf("baseline reason %q", rep.NewlyDenied[0].BaselineReason)
	}
}

func TestRunBoundsGroupsAndExamples(t *testing.T) {
	lines := realEvents(t)
	var b bytes.Buffer
	for i := range 50 {
		// 50 users each listing: 50 groups.
		b.WriteString(strings.Replace(string(lines[1]), `"username":"replay-ann"`, `"username":"u`+string(rune('A'+i%26))+string(rune('a'+i/26))+`"`, 1) + "\n")
	}
	f := writeFile(t, "audit.log", b.Bytes())
	none := deciderFunc(func(authorizer.Attributes) bool { return false })
	for _, workers := range []int{1, 4} {
		rep, err := Run(t.Context(), Options{Files: []string{f}, New: none, MaxGroups: 10, Examples: 1, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.NewlyDenied) != 11 || !rep.NewlyDenied[10].Other || rep.NewlyDenied[10].Count != 40 {
			t.Fatalf("%d workers: %d groups, last %+v; want 10 and other with 40", workers, len(rep.NewlyDenied), rep.NewlyDenied[len(rep.NewlyDenied)-1])
		}
		for _, g := range rep.NewlyDenied[:10] {
			if len(g.Examples) != 1 {
				t.Errorf("examples %+v", g.Examples)
			}
		}
	}
}

func TestReportJSONFieldNames(t *testing.T) {
	f := writeFile(t, "audit.log", bytes.Join(realEvents(t), []byte("\n")))
	rep, err := Run(t.Context(), Options{Files: []string{f}, New: annMayNotList})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	totals := m["totals"].(map[string]any)
	for _, k := range []string{"eventsRead", "otherStages", "unrebuildable", "notSentToDeputy", "decidedOutsideDeputy", "replayed", "unchanged", "newlyDenied", "newlyAllowed"} {
		if _, ok := totals[k]; !ok {
			t.Errorf("totals lack %q: %v", k, totals)
		}
	}
	g := m["newlyDenied"].([]any)[0].(map[string]any)
	for _, k := range []string{"user", "verb", "resource", "count", "check", "reason", "examples"} {
		if _, ok := g[k]; !ok {
			t.Errorf("group lacks %q: %v", k, g)
		}
	}
	ex := g["examples"].([]any)[0].(map[string]any)
	for _, k := range []string{"file", "line", "auditID", "time", "namespace"} {
		if _, ok := ex[k]; !ok {
			t.Errorf("example lacks %q: %v", k, ex)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "NEWLY DENIED") || !strings.Contains(table.String(), "replay-ann") {
		t.Errorf("table:\n%s", table.String())
	}
}

func TestRunErrors(t *testing.T) {
	if _, err := Run(t.Context(), Options{Files: []string{"/nonexistent/audit.log"}, New: annMayNotList}); err == nil || !strings.Contains(err.Error(), "/nonexistent/audit.log") {
		t.Errorf("missing file: %v", err)
	}
	bad := writeFile(t, "bad.gz", []byte{0x1f, 0x8b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	if _, err := Run(t.Context(), Options{Files: []string{bad}, New: annMayNotList}); err == nil || !strings.Contains(err.Error(), "bad.gz") {
		t.Errorf("corrupt gzip: %v", err)
	}
	if _, err := Run(t.Context(), Options{Files: []string{bad}}); err == nil {
		t.Error("no decider accepted")
	}
}
