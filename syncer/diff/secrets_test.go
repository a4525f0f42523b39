package diff_test

import (
	"encoding/base64"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/syncer/diff"
)

// secret is a Secret with data (values given in clear, stored as base64)
// and stringData.
func secret(data, stringData map[string]string) *unstructured.Unstructured {
	s := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}}}
	if data != nil {
		d := map[string]any{}
		for k, v := range data {
			d[k] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		s.Object["data"] = d
	}
	if stringData != nil {
		d := map[string]any{}
		for k, v := range stringData {
			d[k] = v
		}
		s.Object["stringData"] = d
	}
	return s
}

// masks are the data of a masked Secret.
func masks(t *testing.T, s *unstructured.Unstructured) map[string]string {
	t.Helper()
	if s == nil {
		return nil
	}
	if _, ok := s.Object["stringData"]; ok {
		t.Error("masked Secret has stringData")
	}
	d, _, err := unstructured.NestedStringMap(s.Object, "data")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range d {
		if v == "" || strings.Trim(v, "+") != "" {
			t.Errorf("data %s = %q: not a mask", k, v)
		}
	}
	return d
}

// secretValues are every value the tests use, in clear and encoded: none
// may appear in a masked Secret.
var secretValues = []string{"same-value", "live-value", "target-value", "only-live", "only-target", "from-string-data", "sd-other"}

func TestMaskSecrets(t *testing.T) {
	cases := []struct {
		name         string
		live, target *unstructured.Unstructured
		same, differ []string // keys masked alike on both sides, and differently
		liveOnly     []string
		targetOnly   []string
	}{
		{
			name:   "equal, changed, added and removed keys",
			live:   secret(map[string]string{"same": "same-value", "changed": "live-value", "removed": "only-live"}, nil),
			target: secret(map[string]string{"same": "same-value", "changed": "target-value", "added": "only-target"}, nil),
			same:   []string{"same"}, differ: []string{"changed"}, liveOnly: []string{"removed"}, targetOnly: []string{"added"},
		},
		{
			name:   "target's stringData counts as data",
			live:   secret(map[string]string{"a": "from-string-data", "b": "live-value"}, nil),
			target: secret(nil, map[string]string{"a": "from-string-data", "b": "sd-other"}),
			same:   []string{"a"}, differ: []string{"b"},
		},
		{
			name:   "stringData wins over data",
			live:   secret(map[string]string{"a": "from-string-data"}, nil),
			target: secret(map[string]string{"a": "target-value"}, map[string]string{"a": "from-string-data"}),
			same:   []string{"a"},
		},
		{
			name:       "no live side",
			target:     secret(map[string]string{"a": "only-target"}, map[string]string{"b": "sd-other"}),
			targetOnly: []string{"a", "b"},
		},
		{
			name:     "no target side",
			live:     secret(map[string]string{"a": "only-live"}, nil),
			liveOnly: []string{"a"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var liveIn, targetIn *unstructured.Unstructured
			if c.live != nil {
				liveIn = c.live.DeepCopy()
			}
			if c.target != nil {
				targetIn = c.target.DeepCopy()
			}
			live, target := diff.MaskSecrets(c.live, c.target)
			if !reflect.DeepEqual(c.live, liveIn) || !reflect.DeepEqual(c.target, targetIn) {
				t.Error("MaskSecrets modified its input")
			}
			if (live == nil) != (c.live == nil) || (target == nil) != (c.target == nil) {
				t.Fatalf("MaskSecrets = %v, %v", live, target)
			}
			lm, tm := masks(t, live), masks(t, target)
			for _, k := range c.same {
				if lm[k] != tm[k] {
					t.Errorf("key %s: equal values masked as %q and %q", k, lm[k], tm[k])
				}
			}
			for _, k := range c.differ {
				if lm[k] == tm[k] {
					t.Errorf("key %s: different values masked alike as %q", k, lm[k])
				}
			}
			for _, k := range c.liveOnly {
				if _, ok := tm[k]; ok || lm[k] == "" {
					t.Errorf("key %s: live %q, target %q", k, lm[k], tm[k])
				}
			}
			for _, k := range c.targetOnly {
				if _, ok := lm[k]; ok || tm[k] == "" {
					t.Errorf("key %s: live %q, target %q", k, lm[k], tm[k])
				}
			}
			if n := len(c.same) + len(c.differ) + len(c.liveOnly); live != nil && len(lm) != n {
				t.Errorf("live has %d keys, want %d", len(lm), n)
			}
			noValues(t, live, target)
		})
	}
}

// noValues fails when a test value appears in the objects' YAML, in clear or
// encoded.
func noValues(t *testing.T, objs ...*unstructured.Unstructured) {
	t.Helper()
	out, err := diff.Unified(nil, nil, "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		s, err := diff.Unified(nil, o, "x")
		if err != nil {
			t.Fatal(err)
		}
		out += s
		if o != nil {
			b, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			out += string(b)
		}
	}
	for _, v := range secretValues {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(out, form) {
				t.Errorf("value %q appears in the output:\n%s", form, out)
			}
		}
	}
}

// The last-applied annotation of a Secret holds its values: it is masked
// like a value.
func TestMaskSecretsLastApplied(t *testing.T) {
	live := secret(map[string]string{"a": "live-value"}, nil)
	live.SetAnnotations(map[string]string{diff.LastAppliedAnnotation: `{"data":{"a":"live-value"}}`, "other": "kept"})
	target := secret(map[string]string{"a": "live-value"}, nil)
	target.SetAnnotations(map[string]string{diff.LastAppliedAnnotation: `{"data":{"a":"live-value"}}`})
	l, tg := diff.MaskSecrets(live, target)
	la, ta := l.GetAnnotations(), tg.GetAnnotations()
	if la[diff.LastAppliedAnnotation] != ta[diff.LastAppliedAnnotation] || strings.Trim(la[diff.LastAppliedAnnotation], "+") != "" {
		t.Errorf("annotations %q, %q", la, ta)
	}
	if la["other"] != "kept" {
		t.Errorf("other annotation: %q", la)
	}
	target.SetAnnotations(map[string]string{diff.LastAppliedAnnotation: `{"data":{"a":"target-value"}}`})
	l, tg = diff.MaskSecrets(live, target)
	if l.GetAnnotations()[diff.LastAppliedAnnotation] == tg.GetAnnotations()[diff.LastAppliedAnnotation] {
		t.Error("different last-applied annotations masked alike")
	}
	noValues(t, l, tg)
}

// Values that are not base64 or not strings are masked too; equal values
// compare by their decoded bytes, whatever the encoding.
func TestMaskSecretsOddValues(t *testing.T) {
	live := secret(nil, nil)
	live.Object["data"] = map[string]any{"bad": "live-value!!", "num": int64(5), "nil": nil}
	target := secret(nil, nil)
	target.Object["data"] = map[string]any{"bad": "live-value!!", "num": int64(6), "nil": nil}
	l, tg := diff.MaskSecrets(live, target)
	lm, tm := masks(t, l), masks(t, tg)
	if lm["bad"] != tm["bad"] || lm["nil"] != tm["nil"] || lm["num"] == tm["num"] {
		t.Errorf("masks %q, %q", lm, tm)
	}
	// A malformed data field is masked whole.
	live.Object["data"] = "live-value"
	l, _ = diff.MaskSecrets(live, nil)
	noValues(t, l)
}

// Other kinds, and core Secrets' look-alikes of other groups, are not
// touched.
func TestMaskSecretsOtherKinds(t *testing.T) {
	cm := u(t, "apiVersion: v1\nkind: ConfigMap\ndata: {a: b}")
	other := u(t, "apiVersion: example.com/v1\nkind: Secret\ndata: {a: b}")
	l, tg := diff.MaskSecrets(cm, other)
	if l != cm || tg != other {
		t.Error("MaskSecrets changed objects that are no core/v1 Secrets")
	}
	if l, tg := diff.MaskSecrets(nil, nil); l != nil || tg != nil {
		t.Error("MaskSecrets(nil, nil) != nil, nil")
	}
}
