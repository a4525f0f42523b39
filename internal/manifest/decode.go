// Package manifest reads Kubernetes manifests: multi-document YAML or JSON
// into objects. The sync engine's render (syncer/source) and the
// `deputy diff --local` client command both use it, so a directory reads
// the same on both sides; it imports nothing of deputy's.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode splits multi-document YAML (or JSON) into objects, in order; empty
// documents are skipped and a List's items are expanded, as kubectl does.
//
// Errors: a document that is not YAML, or not a Kubernetes object (no
// apiVersion or kind), naming the document's number (from 1).
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("document %d is not a Kubernetes object (it needs apiVersion and kind): %w", doc, err)
		}
		if u.IsList() {
			err := u.EachListItem(func(o runtime.Object) error {
				item, ok := o.(*unstructured.Unstructured)
				if !ok {
					return fmt.Errorf("list item of type %T", o)
				}
				objs = append(objs, item)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document %d has no apiVersion or kind", doc)
		}
		objs = append(objs, u)
	}
}
