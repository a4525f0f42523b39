package decisionlog

import (
	"io"
	"testing"
)

// BenchmarkDecisionLog is the CPU a logged decision costs: "log" the
// request goroutine's part (filter and enqueue; the writer drains the
// buffer meanwhile), "write" the writer's (encode one JSON line into its
// buffer, flushed to io.Discard).
func BenchmarkDecisionLog(b *testing.B) {
	e := entry("deny")
	b.Run("log", func(b *testing.B) {
		l := New(Options{Mode: All, Output: io.Discard, Buffer: 1 << 16})
		b.ReportAllocs()
		for b.Loop() {
			if l.Wants(false) {
				l.Log(e)
			}
		}
		b.StopTimer()
		_ = l.Close(b.Context())
	})
	b.Run("write", func(b *testing.B) {
		l := New(Options{Mode: All, Output: io.Discard})
		_ = l.Close(b.Context()) // stop the writer goroutine; write is called directly
		b.ReportAllocs()
		for b.Loop() {
			l.write(e)
		}
	})
}
