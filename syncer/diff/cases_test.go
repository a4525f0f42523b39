package diff_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/syncer/diff"
)

// caseFile is one testdata/*.yaml: a body deputy applies and the cases that
// start from it.
type caseFile struct {
	Body  map[string]any `json:"body"`
	Cases []driftCase    `json:"cases"`
}

// driftCase is what other writers do after deputy's apply, and the fields
// Missing must then report.
type driftCase struct {
	Name    string   `json:"name"`
	Writes  []write  `json:"writes"`
	Missing []string `json:"missing"`
}

// write is one write by another field manager: a patch of type strategic,
// merge, json or apply (server-side apply, forced), of the object or of its
// subresource.
type write struct {
	Manager     string          `json:"manager"`
	Type        string          `json:"type"`
	Subresource string          `json:"subresource"`
	Patch       json.RawMessage `json:"patch"`
}

// loadCases reads testdata/*.yaml, by file name without extension.
func loadCases(t *testing.T) map[string]caseFile {
	t.Helper()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	out := map[string]caseFile{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cf caseFile
		if err := yaml.UnmarshalStrict(b, &cf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = cf
	}
	return out
}

// ownedFile is where the FieldsV1 kube-apiserver recorded for deputy in a
// case is kept.
func ownedFile(file, name string) string {
	return filepath.Join("testdata", file+"."+name+".owned.json")
}

// int64Body is body as an unstructured object decodes it (integers as
// int64), where YAML decoding gives float64.
func int64Body(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

// TestMissingRecorded runs Missing on the FieldsV1 sets kube-apiserver
// recorded for each case (missing_apiserver_test.go records them), with the
// body decoded as YAML (float64 numbers) and as an unstructured object
// (int64).
func TestMissingRecorded(t *testing.T) {
	for file, cf := range loadCases(t) {
		for _, c := range cf.Cases {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				owned, err := os.ReadFile(ownedFile(file, c.Name))
				if err != nil {
					t.Fatalf("%v (record it: see missing_apiserver_test.go)", err)
				}
				for _, body := range []map[string]any{cf.Body, int64Body(t, cf.Body)} {
					got, err := diff.Missing(owned, body, 0)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want(c.Missing)) {
						t.Errorf("Missing = %q, want %q", got, c.Missing)
					}
				}
			})
		}
	}
}

// want is a case's expected answer: nil for none.
func want(m []string) []string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// indentJSON is b indented, as the recorded files keep it.
func indentJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}
