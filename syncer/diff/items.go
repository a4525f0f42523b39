package diff

import (
	"bytes"
	"encoding/json"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// keyedChild is a "k:" child of a list's node with its key fields parsed.
type keyedChild struct {
	keys map[string]any
	node node
}

// keyedChildren are the "k:" children of a list's node n, in the order of
// their keys (so that a choice between them does not depend on map order).
func keyedChildren(n node) []keyedChild {
	var names []string
	for k := range n {
		if strings.HasPrefix(k, "k:") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	out := make([]keyedChild, 0, len(names))
	for _, k := range names {
		keys, err := decodeJSON(k[2:])
		m, ok := keys.(map[string]any)
		if err != nil || !ok {
			continue // parseSet checked every key
		}
		out = append(out, keyedChild{keys: m, node: n[k].(node)})
	}
	return out
}

// findItem is the child of the list node n that stands for item i: the "k:"
// child of keyed whose key fields match most of the item's fields, the "v:"
// child of a scalar item, else the "i:" child of its index; nil when there
// is none.
func findItem(n node, keyed []keyedChild, i int, item any) node {
	switch item := item.(type) {
	case map[string]any:
		var best node
		bestScore := 0
		for _, kc := range keyed {
			if s := keyScore(kc.keys, item); s > bestScore {
				best, bestScore = kc.node, s
			}
		}
		if best != nil {
			return best
		}
	case []any:
	default:
		if c := valueChild(n, item); c != nil {
			return c
		}
	}
	c, _ := n["i:"+strconv.Itoa(i)].(node)
	return c
}

// keyScore is how many key fields item sets with the key's values, 0 when
// it sets one with another value (a key field the item does not set was
// defaulted by the server and matches).
func keyScore(keys, item map[string]any) int {
	score := 0
	for k, kv := range keys {
		iv, ok := item[k]
		if !ok || iv == nil {
			continue
		}
		if !jsonEqual(kv, iv) {
			return 0
		}
		score++
	}
	return score
}

// valueChild is the "v:" child of n whose value equals item, nil when none.
// The JSON of item is tried first (the common case, an exact key); else
// every "v:" child is compared.
func valueChild(n node, item any) node {
	if b, err := json.Marshal(item); err == nil {
		if c, ok := n["v:"+string(b)].(node); ok {
			return c
		}
	}
	for k, c := range n {
		if !strings.HasPrefix(k, "v:") {
			continue
		}
		if v, err := decodeJSON(k[2:]); err == nil && jsonEqual(v, item) {
			return c.(node)
		}
	}
	return nil
}

// decodeJSON decodes s with numbers as json.Number.
func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// jsonEqual reports whether a and b are the same JSON value: numbers by
// value whatever their Go type (int64, float64, json.Number: 80 equals
// 80.0), maps and lists element by element.
func jsonEqual(a, b any) bool {
	if ra, ok := number(a); ok {
		rb, ok := number(b)
		return ok && ra.Cmp(rb) == 0
	}
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, av := range a {
			bv, ok := bm[k]
			if !ok || !jsonEqual(av, bv) {
				return false
			}
		}
		return true
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bl[i]) {
				return false
			}
		}
		return true
	case string, bool, nil:
		return a == b
	}
	return false
}

// number is v as an exact rational when v is a number of any Go type JSON
// decoding or unstructured objects produce.
func number(v any) (*big.Rat, bool) {
	r := new(big.Rat)
	switch v := v.(type) {
	case json.Number:
		_, ok := r.SetString(v.String())
		return r, ok
	case float64:
		return floatRat(r, v)
	case float32:
		return floatRat(r, float64(v))
	case int:
		return r.SetInt64(int64(v)), true
	case int64:
		return r.SetInt64(v), true
	case int32:
		return r.SetInt64(int64(v)), true
	case uint64:
		return r.SetFrac(new(big.Int).SetUint64(v), big.NewInt(1)), true
	case uint32:
		return r.SetInt64(int64(v)), true
	}
	return nil, false
}

// floatRat is f as a rational; NaN and infinities are no JSON numbers.
func floatRat(r *big.Rat, f float64) (*big.Rat, bool) {
	if r.SetFloat64(f) == nil {
		return nil, false
	}
	return r, true
}
