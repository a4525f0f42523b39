package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// Validate checks spec.source.helm without reading anything (fldPath is its
// path): every error, each naming its field and the fix. Paths must stay
// in the repository and URLs are refused (values come from the repository
// at the synced commit only); parameters need names; kubeVersion must
// parse. A "$REF/path" value file or file parameter is checked for its form
// only (a valid ref name, a path that stays in that repository); whether
// REF names one of spec.sources is ApplicationSpec.ValidateSources' check.
// A nil HelmSource has no errors. Where a path leads is checked when the
// chart renders.
func (h *HelmSource) Validate(fldPath *field.Path) field.ErrorList {
	if h == nil {
		return nil
	}
	var errs field.ErrorList
	for i, f := range h.ValueFiles {
		if msg := checkHelmPath(f); msg != "" {
			errs = append(errs, field.Invalid(fldPath.Child("valueFiles").Index(i), f, msg))
		}
	}
	if _, err := h.ValuesMap(); err != nil {
		name := "values"
		if h.ValuesObject != nil && len(h.ValuesObject.Raw) > 0 {
			name = "valuesObject"
		}
		errs = append(errs, field.Invalid(fldPath.Child(name), "", err.Error()+": give a YAML map of values"))
	}
	for i, p := range h.Parameters {
		if strings.TrimSpace(p.Name) == "" {
			errs = append(errs, field.Required(fldPath.Child("parameters").Index(i).Child("name"), "name the value to set, e.g. image.tag"))
		}
		if strings.Contains(p.Value, "$") {
			errs = append(errs, field.Invalid(fldPath.Child("parameters").Index(i).Child("value"), p.Value, noEnvsubst))
		}
	}
	for i, p := range h.FileParameters {
		fp := fldPath.Child("fileParameters").Index(i)
		if strings.TrimSpace(p.Name) == "" {
			errs = append(errs, field.Required(fp.Child("name"), "name the value to set, e.g. config"))
		}
		if msg := checkHelmPath(p.Path); msg != "" {
			errs = append(errs, field.Invalid(fp.Child("path"), p.Path, msg))
		}
	}
	if h.KubeVersion != "" {
		if _, err := version.ParseGeneric(h.KubeVersion); err != nil {
			errs = append(errs, field.Invalid(fldPath.Child("kubeVersion"), h.KubeVersion, "give a Kubernetes version such as 1.37.0"))
		}
	}
	for i, v := range h.APIVersions {
		if strings.TrimSpace(v) == "" || strings.Count(v, "/") > 2 {
			errs = append(errs, field.Invalid(fldPath.Child("apiVersions").Index(i), v, "give GROUP/VERSION, VERSION (core) or GROUP/VERSION/KIND"))
		}
	}
	return errs
}

// ValuesMap returns Argo CD's inline values: valuesObject when set, else
// values, as a map (empty when neither is set); an error when they are not
// a YAML map.
func (h *HelmSource) ValuesMap() (map[string]any, error) {
	text := []byte(h.Values)
	if h.ValuesObject != nil && len(h.ValuesObject.Raw) > 0 {
		text = h.ValuesObject.Raw
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(text, &m); err != nil {
		return nil, fmt.Errorf("not a YAML map: %v", err)
	}
	return m, nil
}

// checkHelmPath returns why p cannot name a file of the repository (or,
// as $REF/path, of a referenced source's), "" when it can.
func checkHelmPath(p string) string {
	switch {
	case strings.TrimSpace(p) == "":
		return "give a path in the repository"
	case strings.Contains(p, "://"):
		return "URLs are not supported: commit the file to the repository and give its path"
	case strings.HasPrefix(p, "$"):
		return checkRefPath(p)
	case strings.Contains(p, "$"):
		return noEnvsubst
	}
	return ""
}

// noEnvsubst refuses a "$" where Argo CD substitutes its build environment
// ($ARGOCD_APP_NAME, $ARGOCD_APP_REVISION, ...; an unknown variable becomes
// "", "$$" is "$"): rendering it literally would differ from Argo CD.
const noEnvsubst = "Argo CD's build environment variables ($ARGOCD_APP_NAME, ...) and $$ escapes are not supported by deputy yet: write the value itself"
