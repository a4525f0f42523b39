package diff_test

import (
	"encoding/base64"
	"math"
	"strings"
	"testing"

	"deputy.dev/deputy/syncer/diff"
)

func TestUnified(t *testing.T) {
	live := u(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: one, b: two, c: three, d: four, e: five, f: six, g: seven}")
	target := u(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: one, b: two, c: three, d: FOUR, e: five, f: six, g: seven}")

	got, err := diff.Unified(live, target, "v1/ConfigMap/ns/c")
	if err != nil {
		t.Fatal(err)
	}
	want := `--- live/v1/ConfigMap/ns/c
+++ target/v1/ConfigMap/ns/c
@@ -3,7 +3,7 @@
   a: one
   b: two
   c: three
-  d: four
+  d: FOUR
   e: five
   f: six
   g: seven
`
	if got != want {
		t.Errorf("change:\n%s\nwant\n%s", got, want)
	}

	small := u(t, "kind: ConfigMap\ndata: {a: one}")
	got, err = diff.Unified(nil, small, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := "--- live/c\n+++ target/c\n@@ -0,0 +1,3 @@\n+data:\n+  a: one\n+kind: ConfigMap\n"; got != want {
		t.Errorf("create:\n%q\nwant\n%q", got, want)
	}
	got, err = diff.Unified(small, nil, "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := "--- live/c\n+++ target/c\n@@ -1,3 +0,0 @@\n-data:\n-  a: one\n-kind: ConfigMap\n"; got != want {
		t.Errorf("delete:\n%q\nwant\n%q", got, want)
	}

	for _, pair := range [][2]string{{"kind: A\ndata: {b: 1, a: 2}", "data: {a: 2, b: 1}\nkind: A"}, {"", ""}} {
		var a, b = u(t, pair[0]), u(t, pair[1])
		if got, err := diff.Unified(a, b, "x"); err != nil || got != "" {
			t.Errorf("equal: %q, %v", got, err)
		}
	}
	if got, err := diff.Unified(nil, nil, "x"); err != nil || got != "" {
		t.Errorf("nil, nil: %q, %v", got, err)
	}
}

// A Secret's diff shows which keys changed, never a value.
func TestUnifiedSecret(t *testing.T) {
	live := secret(map[string]string{"same": "same-value", "changed": "live-value", "removed": "only-live"}, nil)
	target := secret(map[string]string{"same": "same-value", "changed": "target-value"}, map[string]string{"added": "only-target"})
	got, err := diff.Unified(live, target, "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"-  changed: ++++++++\n", "+  changed: ++++++++++++\n", "-  removed: ++++++++\n", "+  added: ++++++++++++\n", "   same: ++++++++\n"} {
		if !strings.Contains(got, line) {
			t.Errorf("diff lacks %q:\n%s", line, got)
		}
	}
	for _, v := range secretValues {
		if strings.Contains(got, v) || strings.Contains(got, base64.StdEncoding.EncodeToString([]byte(v))) {
			t.Errorf("value %q in the diff:\n%s", v, got)
		}
	}
	if got, err := diff.Unified(live, live, "s"); err != nil || got != "" {
		t.Errorf("equal Secrets: %q, %v", got, err)
	}
}

// A render error of a Secret names no value.
func TestUnifiedErrors(t *testing.T) {
	bad := u(t, "apiVersion: v1\nkind: ConfigMap")
	bad.Object["data"] = map[string]any{"a": math.NaN()}
	if _, err := diff.Unified(nil, bad, "c"); err == nil || !strings.Contains(err.Error(), "target side of c") {
		t.Errorf("error %v", err)
	}
	s := secret(map[string]string{"a": "live-value"}, nil)
	s.Object["type"] = math.Inf(1)
	_, err := diff.Unified(s, nil, "s")
	if err == nil || strings.Contains(err.Error(), "live-value") || strings.Contains(err.Error(), "Inf") {
		t.Errorf("error %v", err)
	}
}
