package diff_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/syncer/diff"
)

// obj is YAML as a map (numbers float64, as sigs.k8s.io/yaml decodes them).
func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMissingRules: the rules of Missing one by one, on hand-written sets
// in the format kube-apiserver writes (the recorded cases are in
// testdata).
func TestMissingRules(t *testing.T) {
	cases := []struct {
		name  string
		owned string
		body  string
		max   int
		want  []string
	}{
		{name: "nil owned covers nothing", owned: "", body: "data: {a: x, b: y}", want: []string{".data.a", ".data.b"}},
		{name: "skipped fields", owned: "{}", body: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n, namespace: ns}\nstatus: {x: 1}"},
		{name: "nulls skipped", owned: `{"f:data":{}}`, body: "data: {a: null}\nspec: null\nmetadata: {labels: null}"},
		{name: "leaf present", owned: `{"f:data":{"f:a":{}}}`, body: "data: {a: x}"},
		{name: "empty map and list need their node only", owned: `{"f:spec":{"f:m":{},"f:l":{}}}`, body: "spec: {m: {}, l: []}"},
		{name: "empty map absent", owned: `{"f:spec":{"f:other":{}}}`, body: "spec: {m: {}}", want: []string{".spec.m"}},
		{name: "atomic map", owned: `{"f:spec":{"f:selector":{}}}`, body: "spec: {selector: {matchLabels: {app: x}}}"},
		{name: "atomic list", owned: `{"f:spec":{"f:args":{".":{}}}}`, body: "spec: {args: [a, b]}"},
		{name: "absent map reports its leaves", owned: `{}`, body: "metadata: {labels: {app: x, app.kubernetes.io/name: y}}",
			want: []string{`.metadata.labels.app`, `.metadata.labels["app.kubernetes.io/name"]`}},
		{name: "absent list reported whole", owned: `{"f:spec":{"f:other":{}}}`, body: "spec: {ports: [{port: 80}]}", want: []string{".spec.ports"}},
		{name: "keyed item, number types", owned: `{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{}}}}`, body: "ports: [{port: 80.0, protocol: TCP}]"},
		{name: "keyed item, defaulted key field absent", owned: `{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{}}}}`, body: "ports: [{port: 80}]"},
		{name: "keyed item, key field differs", owned: `{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{}}}}`, body: "ports: [{port: 80, protocol: UDP}]", want: []string{".ports[0]"}},
		{name: "keyed item, best match wins", owned: `{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{}},"k:{\"port\":80,\"protocol\":\"UDP\"}":{".":{},"f:port":{},"f:protocol":{}}}}`,
			body: "ports: [{port: 80, protocol: UDP}]"},
		{name: "keyed item, no key field set", owned: `{"f:ports":{"k:{\"port\":80}":{".":{},"f:name":{}}}}`, body: "ports: [{name: x}]", want: []string{".ports[name=x]"}},
		{name: "keyed item recursed", owned: `{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:name":{}}}}`, body: "containers: [{name: app, image: x}]",
			want: []string{".containers[name=app].image"}},
		{name: "set item", owned: `{"f:finalizers":{"v:\"a\"":{},"v:2":{}}}`, body: "finalizers: [a, 2.0, c]", want: []string{".finalizers[2]"}},
		{name: "index fallback", owned: `{"f:l":{"i:0":{"f:a":{}},"i:1":{}}}`, body: "l: [{a: 1, b: 2}, [1, 2], 3]", want: []string{".l[0].b", ".l[2]"}},
		{name: "odd field names", owned: `{}`, body: `{"a b": 1, "": 2, "x.y": 3, "ok_-1": 4}`, want: []string{`.ok_-1`, `[""]`, `["a b"]`, `["x.y"]`}},
		{name: "max", owned: "", body: "data: {c: x, a: x, b: x}", max: 2, want: []string{".data.a", ".data.b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := diff.Missing([]byte(c.owned), obj(t, c.body), c.max)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Missing = %q, want %q", got, c.want)
			}
		})
	}
}

// TestMissingNumbers: key fields compare as JSON numbers whatever the Go
// type of the body's value.
func TestMissingNumbers(t *testing.T) {
	owned := []byte(`{"f:ports":{"k:{\"port\":8080}":{".":{},"f:port":{}}}}`)
	for _, v := range []any{8080, int64(8080), int32(8080), float64(8080), json.Number("8080"), json.Number("8080.0"), uint64(8080)} {
		got, err := diff.Missing(owned, map[string]any{"ports": []any{map[string]any{"port": v}}}, 0)
		if err != nil || got != nil {
			t.Errorf("%T %v: Missing = %q, %v; want nil", v, v, got, err)
		}
	}
	for _, v := range []any{8081, "8080", 8080.5, true} {
		got, err := diff.Missing(owned, map[string]any{"ports": []any{map[string]any{"port": v}}}, 0)
		if err != nil || len(got) != 1 {
			t.Errorf("%T %v: Missing = %q, %v; want the item", v, v, got, err)
		}
	}
}

// TestMissingInvalid: owned that is not FieldsV1 is an error.
func TestMissingInvalid(t *testing.T) {
	for _, owned := range []string{`[]`, `{`, `{"f:a":1}`, `{"x":{}}`, `{"k:[1]":{}}`, `{"v:nope":{}}`, `{"i:x":{}}`, `{"f:a":{"z:b":{}}}`, `{} {}`, `"s"`} {
		if got, err := diff.Missing([]byte(owned), map[string]any{"a": "b"}, 0); err == nil {
			t.Errorf("Missing(%s) = %q, want an error", owned, got)
		} else if !strings.HasPrefix(err.Error(), "diff: owned fields are not FieldsV1") {
			t.Errorf("Missing(%s): error %q", owned, err)
		}
	}
}
