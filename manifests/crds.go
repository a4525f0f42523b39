package manifests

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdFS holds the CustomResourceDefinitions shipped with deputy:
// crds/deputy.dev_appprojects.yaml (deputy's AppProject) and
// crds/argoproj.io_appprojects.yaml (a minimal Argo CD AppProject for tests
// only; never apply it next to a real Argo CD).
//
//go:embed crds/*.yaml
var crdFS embed.FS

// CRDDir is the directory of the CRD files inside the embedded tree, and the
// repository path below manifests/ (kubectl apply -f manifests/crds/...).
const CRDDir = "crds"

// DeputyAppProjectCRDFile is the file name of deputy's own AppProject CRD.
const DeputyAppProjectCRDFile = "deputy.dev_appprojects.yaml"

// ArgoCDAppProjectCRDFile is the file name of the minimal argoproj.io
// AppProject CRD used by tests (spec preserved unvalidated).
const ArgoCDAppProjectCRDFile = "argoproj.io_appprojects.yaml"

// CRDFiles returns the embedded CRD files, keyed by file name (e.g.
// DeputyAppProjectCRDFile), as the bytes kubectl would apply. The map and the
// slices are fresh copies on every call.
func CRDFiles() map[string][]byte {
	out := map[string][]byte{}
	entries, err := fs.ReadDir(crdFS, CRDDir)
	if err != nil {
		// The directory is embedded at build time; it cannot be missing.
		panic(fmt.Sprintf("manifests: embedded %s/ is unreadable: %v", CRDDir, err))
	}
	for _, e := range entries {
		data, err := crdFS.ReadFile(path.Join(CRDDir, e.Name()))
		if err != nil {
			panic(fmt.Sprintf("manifests: embedded %s/%s is unreadable: %v", CRDDir, e.Name(), err))
		}
		out[e.Name()] = data
	}
	return out
}

// CRDs decodes every embedded CRD file (strictly: an unknown or duplicate
// field is an error) into apiextensions.k8s.io/v1 objects, sorted by file
// name. They can be handed to envtest (CRDInstallOptions.CRDs) or a client.
//
// Errors: a file that does not decode names the file. The files are tested,
// so an error means a broken build.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files := CRDFiles()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(files[n], crd); err != nil {
			return nil, fmt.Errorf("failed to decode %s/%s: %w", CRDDir, n, err)
		}
		if crd.APIVersion != apiextensionsv1.SchemeGroupVersion.String() || crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("failed to decode %s/%s: want %s CustomResourceDefinition, got %s %s", CRDDir, n, apiextensionsv1.SchemeGroupVersion, crd.APIVersion, crd.Kind)
		}
		out = append(out, crd)
	}
	return out, nil
}
