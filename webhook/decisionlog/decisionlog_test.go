package decisionlog

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func entry(decision string) *Entry {
	return &Entry{Time: time.Unix(1700000000, 0), RequestID: "abc-1", User: "alice", Groups: []string{"devs"}, UID: "u1",
		ExtraKeys: []string{"authentication.kubernetes.io/credential-id"}, Verb: "get", APIVersion: "v1", Resource: "pods",
		Namespace: "team-a", Name: "web", ResourceRequest: true, Decision: decision, Reason: "r", Authorizer: "rbac",
		Impersonation: "none", PolicyGeneration: "0123456789ab", Duration: 42 * time.Microsecond}
}

func TestModesSelectDecisions(t *testing.T) {
	tests := []struct {
		mode Mode
		want []string // decisions logged out of allow, deny, no_opinion
	}{
		{None, nil},
		{Denied, []string{"deny", "no_opinion"}},
		{All, []string{"allow", "deny", "no_opinion"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode)+" logs "+strings.Join(tt.want, ", "), func(t *testing.T) {
			var out syncBuffer
			written := prometheus.NewCounter(prometheus.CounterOpts{Name: "w"})
			l := New(Options{Mode: tt.mode, Output: &out, Written: written})
			for _, d := range []string{"allow", "deny", "no_opinion"} {
				if l.Wants(d == "allow") {
					l.Log(entry(d))
				}
			}
			if err := l.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range out.lines(t) {
				got = append(got, m["decision"].(string))
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("logged %v, want %v", got, tt.want)
			}
			if tt.mode != None {
				if n := testutil.ToFloat64(written); n != float64(len(tt.want)) {
					t.Errorf("written = %v, want %d", n, len(tt.want))
				}
			}
		})
	}
}

func TestLineFields(t *testing.T) {
	var out syncBuffer
	l := New(Options{Mode: All, Output: &out})
	l.Log(entry("deny"))
	nonResource := &Entry{Time: time.Unix(1700000000, 0), User: "bob", Verb: "get", Path: "/healthz", Decision: "no_opinion", Authorizer: "none", Impersonation: "none"}
	l.Log(nonResource)
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	lines := out.lines(t)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2", len(lines))
	}
	want := map[string]any{"msg": "decision", "time": "2023-11-14T22:13:20Z", "requestID": "abc-1", "user": "alice", "groups": []any{"devs"}, "uid": "u1",
		"extra": []any{"authentication.kubernetes.io/credential-id"}, "verb": "get", "apiGroup": "", "apiVersion": "v1", "resource": "pods",
		"subresource": "", "namespace": "team-a", "name": "web", "decision": "deny", "reason": "r", "evaluationError": "",
		"authorizer": "rbac", "impersonation": "none", "policyGeneration": "0123456789ab", "durationMicros": float64(42)}
	got := lines[0]
	if ts, err := time.Parse(time.RFC3339Nano, got["time"].(string)); err == nil {
		got["time"] = ts.UTC().Format(time.RFC3339)
	}
	for k, v := range want {
		if gb, _ := json.Marshal(got[k]); string(gb) != mustJSON(v) {
			t.Errorf("%s = %s, want %s", k, gb, mustJSON(v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected field %s = %v", k, got[k])
		}
	}
	if _, ok := lines[1]["resource"]; ok || lines[1]["path"] != "/healthz" {
		t.Errorf("a non-resource line has path and no resource fields: %v", lines[1])
	}
	if g, ok := lines[1]["groups"].([]any); !ok || len(g) != 0 {
		t.Errorf("absent groups encode as [], got %v", lines[1]["groups"])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSampleRate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	l := New(Options{Mode: All, SampleRate: 0.5, Output: io.Discard, Random: r.Float64})
	defer l.Close(t.Context())
	n := 0
	for range 10000 {
		if l.Wants(false) {
			n++
		}
	}
	// Binomial(10000, 0.5): the standard deviation is 50; ±500 is 10σ.
	if n < 4500 || n > 5500 {
		t.Errorf("rate 0.5 logged %d of 10000 decisions, want about 5000", n)
	}
	denied := New(Options{Mode: Denied, SampleRate: 0.5, Output: io.Discard, Random: r.Float64})
	defer denied.Close(t.Context())
	for range 1000 {
		if denied.Wants(true) {
			t.Fatal("mode denied sampled an allow")
		}
	}
}

// blockingWriter blocks every Write until release is closed, and says
// when the first Write started.
type blockingWriter struct {
	started chan struct{}
	once    sync.Once
	release chan struct{}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	<-w.release
	return len(p), nil
}

func TestFullBufferDropsAndCounts(t *testing.T) {
	w := &blockingWriter{started: make(chan struct{}), release: make(chan struct{})}
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "d"})
	l := New(Options{Mode: All, Output: w, Buffer: 2, Dropped: dropped})
	l.Log(entry("deny")) // the writer takes it and blocks flushing it
	<-w.started
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 { // 2 fill the buffer, 3 are dropped
			l.Log(entry("deny"))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Log blocked on a full buffer")
	}
	if n := testutil.ToFloat64(dropped); n != 3 {
		t.Errorf("dropped = %v, want 3", n)
	}
	close(w.release)
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestNilLoggerLogsNothing(t *testing.T) {
	l := New(Options{Mode: None})
	if l.Enabled() || l.Wants(false) {
		t.Error("mode none wants decisions")
	}
	l.Log(entry("deny"))
	if err := l.Close(t.Context()); err != nil {
		t.Error(err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": None, "none": None, "denied": Denied, "all": All} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseMode("Denied"); err == nil || !strings.Contains(err.Error(), "none, denied or all") {
		t.Errorf("ParseMode(Denied) error = %v, want one naming the modes", err)
	}
}
