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

// crdFS holds the CustomResourceDefinitions shipped with deputy in crds/
// (deputy's AppProject and Application) and, in testing/,
// a minimal Argo CD AppProject CRD for tests only: it lives apart so that
// `kubectl apply -f manifests/crds/` can never replace a real Argo CD's CRD.
//
//go:embed crds/*.yaml testing/*.yaml
var crdFS embed.FS

// TestingCRDDir holds CRDs for tests only (the minimal argoproj.io AppProject).
const TestingCRDDir = "testing"

// CRDDir is the directory of the CRD files inside the embedded tree, and the
// repository path below manifests/ (kubectl apply -f manifests/crds/...).
const CRDDir = "crds"

// DeputyAppProjectCRDFile is the file name of deputy's own AppProject CRD.
const DeputyAppProjectCRDFile = "deputy.dev_appprojects.yaml"

// DeputyApplicationCRDFile is the file name of deputy's own Application CRD.
const DeputyApplicationCRDFile = "deputy.dev_applications.yaml"

// ArgoCDAppProjectCRDFile is the file name of the minimal argoproj.io
// AppProject CRD used by tests (spec preserved unvalidated).
const ArgoCDAppProjectCRDFile = "argoproj.io_appprojects.yaml"

// CRDFiles returns the embedded CRD files, keyed by file name (e.g.
// DeputyAppProjectCRDFile), as the bytes kubectl would apply. The map and the
// slices are fresh copies on every call.
func CRDFiles() map[string][]byte { return embeddedFiles(CRDDir) }

// TestingCRDFiles returns the test-only CRD files (ArgoCDAppProjectCRDFile),
// keyed by file name.
func TestingCRDFiles() map[string][]byte { return embeddedFiles(TestingCRDDir) }

func embeddedFiles(dir string) map[string][]byte {
	out := map[string][]byte{}
	entries, err := fs.ReadDir(crdFS, dir)
	if err != nil {
		// The directory is embedded at build time; it cannot be missing.
		panic(fmt.Sprintf("manifests: embedded %s/ is unreadable: %v", dir, err))
	}
	for _, e := range entries {
		data, err := crdFS.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			panic(fmt.Sprintf("manifests: embedded %s/%s is unreadable: %v", dir, e.Name(), err))
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
	return decodeCRDs(CRDFiles())
}

// TestingCRDs decodes the test-only CRDs like CRDs.
func TestingCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return decodeCRDs(TestingCRDFiles())
}

func decodeCRDs(files map[string][]byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
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
