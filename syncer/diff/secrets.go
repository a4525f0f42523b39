package diff

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Masks of MaskSecrets: a value equal on both sides is shown as sameMask on
// both, a value that differs as liveMask on the live side and targetMask on
// the target side (a key present on one side only gets that side's mask).
// The masks are of '+' characters, as Argo CD's, and say nothing of a
// value's length.
var (
	sameMask   = strings.Repeat("+", 8)
	liveMask   = strings.Repeat("+", 8)
	targetMask = strings.Repeat("+", 12)
)

// IsSecret reports whether u is a core/v1 Secret (apiVersion v1, kind
// Secret), the only kind whose values MaskSecrets hides.
func IsSecret(u *unstructured.Unstructured) bool {
	return u != nil && u.GetAPIVersion() == "v1" && u.GetKind() == "Secret"
}

// MaskSecrets hides the values of a core/v1 Secret before it is shown, as
// Argo CD's HideSecretData (gitops-engine pkg/diff) does, while keeping what
// changed visible: it returns copies of live and target whose data values
// are masks of '+' characters. Every key of either side is masked; a key
// whose value is equal on both sides gets the same mask on both, a key whose
// value differs gets a different mask on each side, so that a diff of the
// results shows exactly the keys that were added, removed or changed and
// never a value, its length or its encoding.
//
// Values are compared as the apiserver stores them: data values decoded
// from base64 (a value that is not valid base64 is compared as written),
// and stringData, which the apiserver merges into data on a write (a
// stringData key wins over the same data key), counted as data. The masked
// copies carry no stringData: its keys are under data, as the server would
// show them. The annotation kubectl.kubernetes.io/last-applied-configuration,
// which holds the values again, is masked the same way.
//
// Either side may be nil (an object to create has no live side, one to
// prune no target); a side that is not a Secret is returned unchanged, and
// when neither is a Secret both are returned as they are. The inputs are
// not modified.
func MaskSecrets(live, target *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	if !IsSecret(live) && !IsSecret(target) {
		return live, target
	}
	lv, tv := secretValues(live), secretValues(target)
	la, ta := lastApplied(live), lastApplied(target)
	if IsSecret(live) {
		live = masked(live, lv, tv, la, ta, liveMask)
	}
	if IsSecret(target) {
		target = masked(target, tv, lv, ta, la, targetMask)
	}
	return live, target
}

// masked is a copy of the Secret u whose data holds a mask for each key of
// own (u's values): sameMask where other holds the same value, differ where
// not. ownAnn and otherAnn are the last-applied annotations of both sides.
func masked(u *unstructured.Unstructured, own, other map[string]string, ownAnn, otherAnn *string, differ string) *unstructured.Unstructured {
	out := u.DeepCopy()
	_, hadData := out.Object["data"]
	_, hadStringData := out.Object["stringData"]
	delete(out.Object, "stringData")
	if hadData || hadStringData {
		data := make(map[string]any, len(own))
		for k, v := range own {
			data[k] = mask(v, other[k], hasKey(other, k), differ)
		}
		out.Object["data"] = data
	}
	if ownAnn != nil {
		ann := out.GetAnnotations()
		ann[LastAppliedAnnotation] = mask(*ownAnn, deref(otherAnn), otherAnn != nil, differ)
		out.SetAnnotations(ann)
	}
	return out
}

// mask is sameMask when the other side holds the same value, else differ.
func mask(own, other string, otherHas bool, differ string) string {
	if otherHas && own == other {
		return sameMask
	}
	return differ
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// secretValues are the values of a Secret's data and stringData by key, in
// a form that compares equal exactly when the stored bytes are equal: "b"
// and the decoded bytes of a base64 string, "r" and the string of one that
// is not base64 (the server would refuse it), "j" and the JSON of a value
// that is not a string. nil when u is not a Secret.
func secretValues(u *unstructured.Unstructured) map[string]string {
	if !IsSecret(u) {
		return nil
	}
	out := map[string]string{}
	if data, ok := u.Object["data"].(map[string]any); ok {
		for k, v := range data {
			out[k] = storedForm(v, true)
		}
	} else if v, ok := u.Object["data"]; ok && v != nil {
		out[""] = storedForm(v, true)
	}
	if sd, ok := u.Object["stringData"].(map[string]any); ok {
		for k, v := range sd {
			out[k] = storedForm(v, false)
		}
	} else if v, ok := u.Object["stringData"]; ok && v != nil {
		out[""] = storedForm(v, false)
	}
	return out
}

// storedForm is v in secretValues' form; encoded says v is base64 (data)
// rather than plain text (stringData).
func storedForm(v any, encoded bool) string {
	s, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return "j?"
		}
		return "j" + string(b)
	}
	if !encoded {
		return "b" + s
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "r" + s
	}
	return "b" + string(b)
}

// lastApplied is the Secret u's last-applied-configuration annotation, nil
// when it has none or is not a Secret.
func lastApplied(u *unstructured.Unstructured) *string {
	if !IsSecret(u) {
		return nil
	}
	v, ok := u.GetAnnotations()[LastAppliedAnnotation]
	if !ok {
		return nil
	}
	return &v
}
