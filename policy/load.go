package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
)

// SourceFile is one policy input: its name (a path, used in error messages and
// to choose the format by extension) and its bytes.
type SourceFile struct {
	Name string
	Data []byte
}

// Formats by file extension. Anything else inside a policy directory is
// skipped; a file named explicitly must have one of these extensions.
const (
	formatObjects = "objects" // .yaml, .yml, .json: Kubernetes objects
	formatTokens  = "tokens"  // .csv: kube-apiserver static token file
)

// FileFormat returns "objects" for .yaml/.yml/.json, "tokens" for .csv and ""
// for anything else.
func FileFormat(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return formatObjects
	case ".csv":
		return formatTokens
	}
	return ""
}

// DocumentError locates a problem in a policy file: the file, the 1-based
// index of the YAML document (and its first line), the item index inside a
// List, and the object. It is what readiness and logs report.
type DocumentError struct {
	File     string
	Document int // 1-based; 0 when the error concerns the whole file
	Line     int // first line of the document, 1-based
	Item     int // 1-based index inside a kind: List, 0 otherwise
	Object   string
	Err      error
}

func (e *DocumentError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Document > 0 {
		fmt.Fprintf(&b, ": document %d (line %d)", e.Document, e.Line)
	}
	if e.Item > 0 {
		fmt.Fprintf(&b, ", item %d", e.Item)
	}
	if e.Object != "" {
		b.WriteString(", ")
		b.WriteString(e.Object)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *DocumentError) Unwrap() error { return e.Err }

// Project is an AppProject together with where it came from.
type Project struct {
	// Group is argoproj.io or deputy.dev.
	Group  string
	Object *v1alpha1.AppProject
	Source string
}

// Objects is the decoded content of a set of policy files.
type Objects struct {
	RBAC         RBACObjects
	Projects     []Project
	Applications []Application
	Tokens       []TokenEntry
	// CRDs are CustomResourceDefinitions, read only for their group, names
	// and scope (the impersonation gate's resource catalog in file mode).
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// FileObjects counts the objects (and tokens) each file contributed, by
	// file name; a file that contributed none is absent.
	FileObjects map[string]int
}

// Decode parses files into Objects. YAML files may hold many documents
// separated by "---" lines and `kind: List` documents; supported kinds are
// rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding,
// ClusterRoleBinding, AppProject of deputy.dev/v1alpha1 and
// argoproj.io/v1alpha1, and Application of deputy.dev/v1alpha1. RBAC objects
// and deputy.dev AppProjects and Applications are decoded strictly (unknown or
// duplicate fields are errors, field names are case-sensitive) and validated
// (RBAC objects as kube-apiserver would, Applications by
// ValidateApplication); argoproj.io AppProjects are decoded strictly against
// Argo CD's own type (DecodeAppProject). apiextensions.k8s.io/v1
// CustomResourceDefinitions are read for their scope. .csv files are static
// token files (ParseTokenFile).
//
// Errors: every problem found, each a *DocumentError, joined with errors.Join;
// two objects with the same kind, namespace and name are an error naming both.
func Decode(files []SourceFile) (*Objects, error) {
	d := decoder{objs: &Objects{RBAC: RBACObjects{Sources: map[string]string{}}, FileObjects: map[string]int{}}, seen: map[string]string{}}
	for _, f := range files {
		switch FileFormat(f.Name) {
		case formatTokens:
			entries, err := ParseTokenFile(f.Name, bytes.NewReader(f.Data))
			if err != nil {
				d.errs = append(d.errs, &DocumentError{File: f.Name, Err: err})
				continue
			}
			d.objs.Tokens = append(d.objs.Tokens, entries...)
			if len(entries) > 0 {
				d.objs.FileObjects[f.Name] += len(entries)
			}
		case formatObjects:
			d.decodeFile(f)
		default:
			d.errs = append(d.errs, &DocumentError{File: f.Name, Err: errors.New("unsupported file type: policy files end in .yaml, .yml, .json (objects) or .csv (tokens)")})
		}
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return d.objs, nil
}

type decoder struct {
	objs *Objects
	seen map[string]string // object key -> location
	errs []error
}

type document struct {
	data []byte
	line int
}

// splitDocuments splits a YAML stream at "---" lines. Hand-written rather than
// k8s.io/apimachinery's YAMLReader because error messages need each
// document's first line number, which that reader does not report.
func splitDocuments(data []byte) []document {
	var docs []document
	var cur bytes.Buffer
	start, line := 1, 0
	ended := false // the current document was closed by "..."
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for sc.Scan() {
		line++
		text := sc.Text()
		trimmed := strings.TrimRight(text, " \t\r")
		if isMarker(trimmed, "...") || isMarker(trimmed, "---") {
			// "..." ends a document (the YAML parser would read only what
			// precedes it); "---" starts one, unless it follows "..." with
			// nothing in between, which is still the same boundary.
			if !(ended && isMarker(trimmed, "---") && isEmptyDocument(cur.Bytes())) {
				docs = append(docs, document{data: bytes.Clone(cur.Bytes()), line: start})
			}
			cur.Reset()
			start = line + 1
			ended = isMarker(trimmed, "...")
			// Content after "---" ("--- {kind: ...}", "--- !!map") is the
			// start of the new document: keep the line, the YAML parser
			// accepts the marker.
			if rest := strings.TrimSpace(trimmed[3:]); !ended && rest != "" && rest[0] != '#' {
				cur.WriteString(text)
				cur.WriteByte('\n')
				start = line
			}
			continue
		}
		cur.WriteString(text)
		cur.WriteByte('\n')
	}
	return append(docs, document{data: cur.Bytes(), line: start})
}

// isMarker reports whether line is the YAML marker "---" or "...", alone or
// followed by a blank and more.
func isMarker(line, marker string) bool {
	rest, ok := strings.CutPrefix(line, marker)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t')
}

// isEmptyDocument reports whether a document holds only blank lines and comments.
func isEmptyDocument(data []byte) bool {
	for _, l := range bytes.Split(data, []byte("\n")) {
		l = bytes.TrimSpace(l)
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

func (d *decoder) decodeFile(f SourceFile) {
	isJSON := strings.ToLower(filepath.Ext(f.Name)) == ".json"
	docs := []document{{data: f.Data, line: 1}}
	format := "JSON"
	if !isJSON {
		docs = splitDocuments(f.Data)
		format = "YAML"
	}
	for i, doc := range docs {
		if isEmptyDocument(doc.data) {
			continue
		}
		loc := &DocumentError{File: f.Name, Document: i + 1, Line: doc.line}
		if isJSON {
			// The YAML parser below reads only the first document of its
			// input, so content after the JSON value ("{...}\n---\n{...}")
			// would be dropped silently; a JSON decoder rejects it.
			var v any
			if err := json.Unmarshal(doc.data, &v); err != nil {
				loc.Err = fmt.Errorf("not valid JSON: %w", err)
				d.errs = append(d.errs, loc)
				continue
			}
		}
		// YAMLToJSONStrict rejects duplicate keys, in JSON too.
		jsonData, err := yaml.YAMLToJSONStrict(doc.data)
		if err != nil {
			loc.Err = fmt.Errorf("not valid %s: %w", format, err)
			d.errs = append(d.errs, loc)
			continue
		}
		d.decodeObject(jsonData, *loc)
	}
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func (d *decoder) fail(loc DocumentError, err error) {
	loc.Err = err
	d.errs = append(d.errs, &loc)
}

func (d *decoder) decodeObject(data []byte, loc DocumentError) {
	var tm typeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &tm); err != nil {
		d.fail(loc, fmt.Errorf("not a Kubernetes object: %w", err))
		return
	}
	if tm.Kind == "" || tm.APIVersion == "" {
		d.fail(loc, errors.New("apiVersion and kind are required (e.g. apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole)"))
		return
	}
	if tm.Kind == "List" && (tm.APIVersion == "v1" || strings.HasSuffix(tm.APIVersion, "/v1")) {
		if loc.Item > 0 {
			d.fail(loc, errors.New("a List may not contain a List"))
			return
		}
		// The envelope is strict too: a misspelt "items" would otherwise
		// load nothing, silently.
		var list struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ListMeta   `json:"metadata"`
			Items      []json.RawMessage `json:"items"`
		}
		if !d.strict(data, &list, loc) {
			return
		}
		for i, item := range list.Items {
			itemLoc := loc
			itemLoc.Item = i + 1
			d.decodeObject(item, itemLoc)
		}
		return
	}
	loc.Object = tm.Kind + " " + objectName(tm.Metadata.Namespace, tm.Metadata.Name)
	where := loc.location()

	switch tm.APIVersion + "/" + tm.Kind {
	case "rbac.authorization.k8s.io/v1/Role":
		var o rbacv1.Role
		if d.strict(data, &o, loc) {
			d.add(loc, "Role", o.Namespace, o.Name, validateRole(&o), func() {
				d.objs.RBAC.Roles = append(d.objs.RBAC.Roles, &o)
			})
		}
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		var o rbacv1.ClusterRole
		if d.strict(data, &o, loc) {
			o.Namespace = "" // cluster-scoped: kube-apiserver clears it too
			d.add(loc, "ClusterRole", "", o.Name, validateClusterRole(&o), func() {
				d.objs.RBAC.ClusterRoles = append(d.objs.RBAC.ClusterRoles, &o)
			})
		}
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		var o rbacv1.RoleBinding
		if d.strict(data, &o, loc) {
			defaultRoleRef(&o.RoleRef)
			defaultSubjects(o.Subjects)
			d.add(loc, "RoleBinding", o.Namespace, o.Name, validateRoleBinding(&o), func() {
				d.objs.RBAC.RoleBindings = append(d.objs.RBAC.RoleBindings, &o)
				d.objs.RBAC.Sources["RoleBinding/"+o.Namespace+"/"+o.Name] = where
			})
		}
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if d.strict(data, &o, loc) {
			o.Namespace = ""
			defaultRoleRef(&o.RoleRef)
			defaultSubjects(o.Subjects)
			d.add(loc, "ClusterRoleBinding", "", o.Name, validateClusterRoleBinding(&o), func() {
				d.objs.RBAC.ClusterRoleBindings = append(d.objs.RBAC.ClusterRoleBindings, &o)
				d.objs.RBAC.Sources["ClusterRoleBinding//"+o.Name] = where
			})
		}
	case "deputy.dev/v1alpha1/AppProject", "argoproj.io/v1alpha1/AppProject":
		group := strings.TrimSuffix(tm.APIVersion, "/v1alpha1")
		o, err := DecodeAppProject(group, data)
		if err != nil {
			d.fail(loc, err)
			return
		}
		errs, _ := ValidateAppProject(o)
		errs = append(errs, validateNamespaceName(o.Namespace, true, field.NewPath("metadata", "namespace"))...)
		d.add(loc, group+"/AppProject", o.Namespace, o.Name, errs, func() {
			d.objs.Projects = append(d.objs.Projects, Project{Group: group, Object: o, Source: where})
		})
	case "apiextensions.k8s.io/v1/CustomResourceDefinition":
		// Read for the impersonation gate's resource catalog (file mode):
		// the scope of the custom resources the policy's projects name.
		var o apiextensionsv1.CustomResourceDefinition
		if d.strict(data, &o, loc) {
			if err := validateCRDForCatalog(&o); err != nil {
				d.fail(loc, err)
				return
			}
			d.add(loc, "CustomResourceDefinition", "", o.Name, nil, func() {
				d.objs.CRDs = append(d.objs.CRDs, &o)
			})
		}
	case "deputy.dev/v1alpha1/Application":
		var o v1alpha1.Application
		if d.strict(data, &o, loc) {
			d.add(loc, "deputy.dev/Application", o.Namespace, o.Name, ValidateApplication(&o), func() {
				d.objs.Applications = append(d.objs.Applications, Application{Object: &o, Source: where})
			})
		}
	case "argoproj.io/v1alpha1/Application":
		d.fail(loc, errors.New("an argoproj.io Application is Argo CD's: deputy syncs deputy.dev/v1alpha1 Applications; change apiVersion to deputy.dev/v1alpha1"))
	default:
		d.fail(loc, fmt.Errorf("unsupported apiVersion/kind %s %s: policy files hold rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding, AppProject of deputy.dev/v1alpha1 or argoproj.io/v1alpha1, Application of deputy.dev/v1alpha1, and apiextensions.k8s.io/v1 CustomResourceDefinition", tm.APIVersion, tm.Kind))
	}
}

// location is the short form used in messages: "file.yaml document 3" or
// "file.yaml document 3 item 2" (documents and List items count from 1).
func (e *DocumentError) location() string {
	s := fmt.Sprintf("%s document %d", e.File, e.Document)
	if e.Item > 0 {
		s += fmt.Sprintf(" item %d", e.Item)
	}
	return s
}

func objectName(ns, name string) string {
	if ns == "" {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%q", ns+"/"+name)
}

// strict decodes case-sensitively and rejects unknown and duplicate fields,
// the way kube-apiserver's strict field validation does.
func (d *decoder) strict(data []byte, into any, loc DocumentError) bool {
	strictErrs, err := kjson.UnmarshalStrict(data, into, kjson.DisallowUnknownFields)
	if err != nil {
		d.fail(loc, err)
		return false
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		sort.Strings(msgs)
		d.fail(loc, fmt.Errorf("%s (fix or remove the field)", strings.Join(msgs, "; ")))
		return false
	}
	return true
}

func (d *decoder) add(loc DocumentError, kind, ns, name string, errs field.ErrorList, store func()) {
	if len(errs) > 0 {
		d.fail(loc, errs.ToAggregate())
		return
	}
	key := kind + "/" + ns + "/" + name
	if prev, dup := d.seen[key]; dup {
		d.fail(loc, fmt.Errorf("duplicate object: already defined at %s (each object may be defined once)", prev))
		return
	}
	d.seen[key] = loc.location()
	d.objs.FileObjects[loc.File]++
	store()
}
