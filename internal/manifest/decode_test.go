package manifest

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	objs, err := Decode([]byte(`---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
# only a comment
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}
- {apiVersion: v1, kind: Secret, metadata: {name: c}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.GetKind()+"/"+o.GetName())
	}
	if got := strings.Join(names, ","); got != "ConfigMap/a,ConfigMap/b,Secret/c" {
		t.Errorf("objects %s", got)
	}
	for _, bad := range []struct{ in, want string }{
		{"apiVersion: v1\nkind: ConfigMap\n---\nmetadata: {name: x}\n", "document 2"},
		{"a: [b\n", "document 1"},
	} {
		if _, err := Decode([]byte(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Decode(%q) = %v, want an error naming %s", bad.in, err, bad.want)
		}
	}
}
