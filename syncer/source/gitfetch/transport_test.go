package gitfetch

import (
	"errors"
	"testing"

	"deputy.dev/deputy/syncer/source/limit"
)

// The delta header reader finds the target size in a delta's first bytes.
func TestDeltaHeaderWriter(t *testing.T) {
	varint := func(v uint64) []byte {
		var out []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v == 0 {
				return append(out, c)
			}
			out = append(out, c|0x80)
		}
	}
	header := append(varint(100), varint(1<<30)...)
	for _, split := range []int{1, 2, len(header)} {
		b := NewBudget(Limits{MaxFileBytes: 1 << 20, MaxFetchBytes: 1 << 30, MaxFetchObjects: 1000})
		w := &deltaHeaderWriter{budget: b}
		_, err1 := w.Write(header[:split])
		_, err2 := w.Write(append(header[split:], 0x90, 0x01))
		if err := errors.Join(err1, err2); err == nil || !errors.As(err, new(*limit.Error)) {
			t.Errorf("split at %d: err = %v, want a limit error for a 1 GiB target", split, err)
		}
	}
	b := NewBudget(Limits{MaxFileBytes: 1 << 20, MaxFetchBytes: 1 << 30, MaxFetchObjects: 1000})
	w := &deltaHeaderWriter{budget: b}
	if _, err := w.Write(append(append(varint(100), varint(200)...), 1, 2, 3)); err != nil {
		t.Errorf("a small target: %v", err)
	}
}
