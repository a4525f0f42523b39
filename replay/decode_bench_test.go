package replay

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkDecodeEvent decodes generated events (test/load/auditgen, ~1.1 KB
// each) given in REPLAY_BENCH_LINES, or the real ones of testdata.
func BenchmarkDecodeEvent(b *testing.B) {
	path := os.Getenv("REPLAY_BENCH_LINES")
	if path == "" {
		path = "testdata/kube-apiserver-1.37.log"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	var ev event
	b.SetBytes(int64(len(data) / len(lines)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := decodeEvent(lines[i%len(lines)], &ev); !ok {
			b.Fatal("not decoded")
		}
		i++
	}
}
