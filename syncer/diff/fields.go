package diff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// node is one node of a FieldsV1 set: its children by key ("f:<field>",
// "k:<key fields>", "v:<value>", "i:<index>", and "." for the node itself).
type node = map[string]any

// Missing compares the body deputy applied with server-side apply with the
// set of fields deputy's managedFields entry owns, and returns the fields
// body sets that the set does not contain: the fields deputy no longer owns
// because another writer changed them (the apiserver moves a field's
// ownership to whoever changes its value) or removed them. It reads no
// value of the live object, only the set, which a metadata-only read
// returns.
//
// owned is the FieldsV1 JSON of deputy's entry (field manager "deputy",
// operation Apply: metav1.ManagedFieldsEntry.FieldsV1.Raw), in
// structured-merge-diff's format: "f:<name>" for a field, "k:<JSON object>"
// for the list item with these key fields, "v:<JSON value>" for an item of
// a set, "i:<index>" for an item of a list without keys, "." for the node
// itself. nil or empty owned owns nothing. body is the applied object.
//
// The result is the paths of the missing fields, readable rather than
// parseable (".spec.template.spec.containers[name=app].image", ".data.key",
// `.metadata.labels["app.kubernetes.io/name"]`; a list item by its name
// field when it has one, else by its index), sorted, at most max of them
// (0: all); nil when owned covers body. The error says owned is not FieldsV1
// JSON.
//
// How body is read, following what the apiserver records for an apply:
//   - apiVersion, kind, metadata.name, metadata.namespace (never in a
//     field set) and status (a subresource) are skipped, and so is a null
//     value anywhere (an applied null removes a field).
//   - A field must have its "f:" child; a leaf needs nothing more (values
//     are not in field sets); a map is compared field by field. A map or
//     list whose node has no children but "." is owned as a whole (an
//     atomic map or list), and an empty map or list needs its node only.
//     Under a missing map, each of its fields is reported; a missing list
//     is reported as a whole.
//   - A list item is found by a "k:" child whose key fields equal the
//     item's fields of the same names, compared as JSON values (80 equals
//     80.0); a key field the item does not set is accepted (the server
//     defaulted it, like a port's protocol), but at least one must match.
//     A scalar item is found by its "v:" child. Either falls back to the
//     "i:" child of its index. An item found nowhere is reported as a
//     whole; a found one is compared field by field.
func Missing(owned []byte, body map[string]any, max int) ([]string, error) {
	set, err := parseSet(owned)
	if err != nil {
		return nil, err
	}
	w := &walker{}
	w.object(set, body)
	if len(w.missing) == 0 {
		return nil, nil
	}
	sort.Strings(w.missing)
	if max > 0 && len(w.missing) > max {
		w.missing = w.missing[:max]
	}
	return w.missing, nil
}

// parseSet parses and checks a FieldsV1 set; nil or blank is the empty set.
func parseSet(owned []byte) (node, error) {
	if len(bytes.TrimSpace(owned)) == 0 {
		return node{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(owned))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("diff: owned fields are not FieldsV1 JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("diff: owned fields are not FieldsV1 JSON: data after the top-level object")
	}
	n, ok := v.(node)
	if !ok {
		return nil, errors.New("diff: owned fields are not FieldsV1 JSON: not an object")
	}
	if err := checkNode(n, ""); err != nil {
		return nil, err
	}
	return n, nil
}

// checkNode checks that every child of n is an object under a key of the
// FieldsV1 format.
func checkNode(n node, path string) error {
	for k, v := range n {
		c, ok := v.(node)
		if !ok {
			return fmt.Errorf("diff: owned fields are not FieldsV1: %s%q is not an object", path, k)
		}
		if err := checkKey(k); err != nil {
			return fmt.Errorf("diff: owned fields are not FieldsV1: %s%q: %w", path, k, err)
		}
		if err := checkNode(c, path+k+"/"); err != nil {
			return err
		}
	}
	return nil
}

// checkKey checks one key of a FieldsV1 node.
func checkKey(k string) error {
	if k == "." {
		return nil
	}
	prefix, rest, ok := strings.Cut(k, ":")
	if !ok {
		return errors.New("no f:, k:, v: or i: prefix")
	}
	switch prefix {
	case "f":
		return nil
	case "k":
		var m map[string]any
		if err := json.Unmarshal([]byte(rest), &m); err != nil || m == nil {
			return errors.New("k: is not followed by a JSON object")
		}
	case "v":
		if !json.Valid([]byte(rest)) {
			return errors.New("v: is not followed by a JSON value")
		}
	case "i":
		if _, err := strconv.Atoi(rest); err != nil {
			return errors.New("i: is not followed by an index")
		}
	default:
		return errors.New("unknown prefix")
	}
	return nil
}

// walker collects the missing paths of one Missing call.
type walker struct {
	missing []string
}

// object walks the applied object body against the set's root.
func (w *walker) object(set node, body map[string]any) {
	for k, v := range body {
		switch k {
		case "apiVersion", "kind", "status":
			continue
		case "metadata":
			md, ok := v.(map[string]any)
			if !ok {
				break
			}
			rest := make(map[string]any, len(md))
			for mk, mv := range md {
				if mk != "name" && mk != "namespace" {
					rest[mk] = mv
				}
			}
			if len(rest) == 0 {
				continue
			}
			v = rest
		}
		w.field("", set, k, v)
	}
}

// field walks field k of a map at path, whose node is n, with value v.
func (w *walker) field(path string, n node, k string, v any) {
	if v == nil {
		return
	}
	p := path + fieldPath(k)
	child, ok := n["f:"+k].(node)
	if !ok {
		w.absent(p, v)
		return
	}
	w.value(p, child, v)
}

// value walks the value v at path against its node n.
func (w *walker) value(path string, n node, v any) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 || whole(n) {
			return
		}
		for k, fv := range v {
			w.field(path, n, k, fv)
		}
	case []any:
		if len(v) == 0 || whole(n) {
			return
		}
		w.list(path, n, v)
	}
}

// absent reports the value v at path, which the set lacks: each field of a
// non-empty map, else the path itself.
func (w *walker) absent(path string, v any) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		w.missing = append(w.missing, path)
		return
	}
	for k, fv := range m {
		if fv != nil {
			w.absent(path+fieldPath(k), fv)
		}
	}
}

// whole reports whether n is owned as a whole: no children but ".".
func whole(n node) bool {
	for k := range n {
		if k != "." {
			return false
		}
	}
	return true
}

// list walks the items of a list at path against its node n.
func (w *walker) list(path string, n node, items []any) {
	keyed := keyedChildren(n)
	for i, item := range items {
		if item == nil {
			continue
		}
		p := path + itemPath(i, item)
		child := findItem(n, keyed, i, item)
		if child == nil {
			w.missing = append(w.missing, p)
			continue
		}
		w.value(p, child, item)
	}
}

// itemPath is the path step of item i of a list: [name=NAME] when the item
// is an object with a string name, else [i].
func itemPath(i int, item any) string {
	if m, ok := item.(map[string]any); ok {
		if name, ok := m["name"].(string); ok {
			return "[name=" + name + "]"
		}
	}
	return "[" + strconv.Itoa(i) + "]"
}

// fieldPath is the path step of field k: .k when k is a plain name, else
// ["k"].
func fieldPath(k string) string {
	if k == "" {
		return `[""]`
	}
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "[" + strconv.Quote(k) + "]"
		}
	}
	return "." + k
}
