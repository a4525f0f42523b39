package webhook

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/policy/v1alpha1"
)

// maxLocalDiffObjects bounds the objects of a local diff (deputy diff
// --local reads at most as many).
const maxLocalDiffObjects = 10000

// localDiffExample ends the 400s of a local diff: what to send.
const localDiffExample = `send {"objects": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, ...}, ...]}`

// diffLocal answers POST .../applications/{name}/diff: the diff of the
// manifests in the body (v1alpha1.LocalDiffRequest) instead of what the
// Application's sources render; otherwise as diff. Authorized as verb
// create on applications/diff: whoever may send manifests may see, in the
// diff, any object the derived ServiceAccount can read by naming it, a
// stronger grant than get. Errors as diff's, and 400 for a body that is not
// a LocalDiffRequest (naming the object's index), 413 above
// v1alpha1.MaxLocalDiffRequestBytes, 415 for a body that is not JSON.
func (h *APIHandler) diffLocal(w http.ResponseWriter, r *http.Request) {
	objects, serr := readLocalDiff(w, r)
	if serr != nil {
		writeStatus(w, serr)
		return
	}
	h.runDiff(w, r, "create", v1alpha1.SyncOperation{}, objects)
}

// readLocalDiff reads a local diff's body strictly: no query parameters,
// JSON (or no content type), within the size limit, only the field
// objects, at least one object and at most maxLocalDiffObjects, each a
// Kubernetes object with apiVersion, kind and metadata.name (not a List).
// Objects' contents are never quoted in the errors (a Secret's values).
func readLocalDiff(w http.ResponseWriter, r *http.Request) ([]*unstructured.Unstructured, *statusError) {
	for k := range r.URL.Query() {
		return nil, badRequest("unknown query parameter %q: a local diff (POST) takes none and has no revisions: the manifests are in the body", k)
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); ct != "" && (err != nil || mt != "application/json") {
		return nil, newStatusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("unsupported content type %q: send application/json, %s", ct, strings.TrimPrefix(localDiffExample, "send ")))
	}
	body, serr := readLimitedBody(w, r, v1alpha1.MaxLocalDiffRequestBytes)
	if serr != nil {
		if serr.code() == http.StatusRequestEntityTooLarge {
			serr = serr.withMessage(serr.status.Message + ": diff fewer or smaller manifests")
		}
		return nil, serr
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("request body is empty: %s", localDiffExample)
	}
	var req v1alpha1.LocalDiffRequest
	strictErrs, err := kjson.UnmarshalStrict(body, &req) // case-sensitive; unknown and duplicate fields are strict errors
	if err != nil {
		return nil, badRequest("failed to decode the local diff request: %v (%s)", err, localDiffExample)
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return nil, badRequest("invalid local diff request: %s (the only field is objects)", strings.Join(msgs, "; "))
	}
	switch n := len(req.Objects); {
	case n == 0:
		return nil, badRequest("objects is empty: %s", localDiffExample)
	case n > maxLocalDiffObjects:
		return nil, badRequest("objects has %d objects, more than the limit of %d: diff fewer manifests", n, maxLocalDiffObjects)
	}
	out := make([]*unstructured.Unstructured, len(req.Objects))
	for i, raw := range req.Objects {
		u, msg := localObject(raw)
		if msg != "" {
			return nil, badRequest("objects[%d] %s", i, msg)
		}
		out[i] = u
	}
	return out, nil
}

// localObject decodes one object of a local diff, or says what is wrong
// with it (without quoting it).
func localObject(raw []byte) (*unstructured.Unstructured, string) {
	var m map[string]any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &m); err != nil || m == nil {
		return nil, "is not a JSON object: each object is a Kubernetes manifest"
	}
	u := &unstructured.Unstructured{Object: m}
	apiVersion, _, _ := unstructured.NestedString(m, "apiVersion")
	kind, _, _ := unstructured.NestedString(m, "kind")
	name, _, _ := unstructured.NestedString(m, "metadata", "name")
	switch {
	case apiVersion == "":
		return nil, "has no apiVersion (a string): set it, e.g. apps/v1"
	case kind == "":
		return nil, "has no kind (a string): set it, e.g. Deployment"
	case u.IsList():
		return nil, fmt.Sprintf("is a %s: send its items, one object each", kind)
	case name == "":
		return nil, fmt.Sprintf("(%s %s) has no metadata.name (a string): a diff applies by name; set it", apiVersion, kind)
	}
	if _, err := u.MarshalJSON(); err != nil {
		return nil, fmt.Sprintf("(%s %s %q) cannot be encoded: %v", apiVersion, kind, name, err)
	}
	return u, ""
}
