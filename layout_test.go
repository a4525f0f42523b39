package deputy_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// module is deputy's module path.
const module = "deputy.dev/deputy"

// allowedImports is DESIGN.md "Layout" as data: for each package of the
// module, the packages of the module its non-test files may import. A
// package missing here fails TestLayout: add it with its place in the
// layout. "*" allows every package of the module.
var allowedImports = map[string][]string{
	"cmd/deputy":              {"*"},
	"serve":                   {"webhook", "apps", "syncer", "syncer/source", "syncer/cluster", "authorizer", "tokenreview", "policy", "policy/clustersource", "policy/v1alpha1", "config", "certs", "examples", "internal/secretfile", "webhook/decisionlog"},
	"webhook":                 {"apps", "apps/gitpush", "authorizer", "tokenreview", "policy", "policy/v1alpha1", "internal/secretfile", "webhook/decisionlog"},
	"webhook/decisionlog":     {},
	"apps":                    {"apps/gitpush", "apps/appstatus", "syncer", "syncer/health", "syncer/diff", "syncer/livestate", "policy", "policy/v1alpha1"},
	"syncer":                  {"syncer/source", "syncer/health", "syncer/waves", "syncer/permissions", "syncer/diff", "syncer/livestate", "syncer/cluster", "policy", "policy/v1alpha1"},
	"syncer/diff":             {},
	"apps/gitpush":            {"policy/v1alpha1"},
	"apps/appstatus":          {"syncer", "syncer/health", "policy/v1alpha1"},
	"syncer/cluster":          {"policy/v1alpha1"},
	"syncer/permissions":      {},
	"syncer/waves":            {"policy/v1alpha1"},
	"syncer/health":           {"policy/v1alpha1", "syncer/waves"},
	"syncer/livestate":        {},
	"syncer/source":           {"policy/v1alpha1", "internal/secretfile", "internal/manifest", "syncer/source/helm", "syncer/source/localrepo", "syncer/source/chartrepo", "syncer/source/gitfetch", "syncer/source/limit"},
	"syncer/source/localrepo": {},
	"syncer/source/helm":      {"policy/v1alpha1"},
	"syncer/source/chartrepo": {"policy", "policy/v1alpha1", "syncer/source/limit"},
	"syncer/source/gitfetch":  {"syncer/source/limit"},
	"syncer/source/limit":     {},
	"authorizer":              {"policy", "policy/v1alpha1"},
	"replay":                  {"authorizer", "policy", "policy/v1alpha1"},
	"tokenreview":             {"policy", "policy/v1alpha1", "internal/secretfile"},
	"apiclient":               {"policy/v1alpha1", "internal/secretfile"},
	"policy":                  {"policy/v1alpha1"},
	"policy/clustersource":    {"policy", "policy/v1alpha1"},
	"policy/v1alpha1":         {},
	"config":                  {"internal/secretfile"},
	"certs":                   {"internal/secretfile"},
	"manifests":               {"authorizer", "config", "certs", "policy", "policy/v1alpha1"},
	"examples":                {},
	"internal/secretfile":     {},
	"internal/manifest":       {},
}

// clientOnly are packages deputy's client commands use: their whole
// dependency graph must stay free of the server.
var clientOnly = []string{"apiclient"}

// server are the packages that make deputy's server.
var server = []string{"serve", "webhook", "apps", "syncer", "syncer/source", "authorizer", "tokenreview"}

// Size limits of the layout issue (13): non-test lines.
const (
	maxPackageLines  = 4000
	maxFileLines     = 600
	maxFunctionLines = 120
)

// packages returns the module's packages (relative directories) with their
// direct imports of the module's packages, from non-test files.
func packages(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (name == "test" && path == "test" || name == "testdata" || name == "bin" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		if len(pkg.GoFiles) == 0 {
			return nil
		}
		var deps []string
		for _, imp := range pkg.Imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps = append(deps, rel)
			}
		}
		out[filepath.ToSlash(path)] = deps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLayout fails when a package imports what DESIGN.md "Layout" forbids
// (dependencies point one way: cmd → serve → {webhook, apps, syncer,
// authorizer, tokenreview, policy, config, certs}; webhook → {apps,
// authorizer, tokenreview, policy}; apps → syncer → policy; nothing below
// serve imports config), or when the client's packages depend on the
// server.
func TestLayout(t *testing.T) {
	pkgs := packages(t)
	for pkg, deps := range pkgs {
		allowed, ok := allowedImports[pkg]
		if !ok {
			t.Errorf("package %s is not in allowedImports: add it with the packages it may import (DESIGN.md, Layout)", pkg)
			continue
		}
		for _, d := range deps {
			if !slices.Contains(allowed, "*") && !slices.Contains(allowed, d) {
				t.Errorf("%s imports %s: not allowed by the layout (DESIGN.md, Layout); allowed: %v", pkg, d, allowed)
			}
		}
	}
	// The client's transitive dependencies.
	for _, c := range clientOnly {
		seen := map[string]bool{}
		var walk func(p string)
		walk = func(p string) {
			if seen[p] {
				return
			}
			seen[p] = true
			for _, d := range pkgs[p] {
				walk(d)
			}
		}
		walk(c)
		for _, s := range server {
			if seen[s] {
				t.Errorf("%s depends on the server package %s", c, s)
			}
		}
	}
}

// TestClientCommandsDoNotImportTheServer: cmd/deputy's client commands
// (every file but the server's own commands) reach deputy's API through
// apiclient, never through the server's packages.
func TestClientCommandsDoNotImportTheServer(t *testing.T) {
	// main.go starts render workers (source.IsRenderWorker); serve.go is
	// the server's command; can-i evaluates a request offline exactly as
	// the server would, so it composes the authorizer through
	// serve.GateOptions, and so does replay, which decides recorded
	// requests as the server would; render renders offline exactly as a
	// sync does (source.RenderApplication, serve.SourceOptions).
	serverCommands := []string{"main.go", "serve.go", "can_i.go", "replay.go", "render.go"}
	files, err := filepath.Glob("cmd/deputy/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || slices.Contains(serverCommands, filepath.Base(f)) {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			for _, s := range []string{"serve", "webhook", "apps", "syncer"} {
				if p == module+"/"+s {
					t.Errorf("%s imports %s: client commands reach deputy's API through apiclient", f, p)
				}
			}
		}
	}
}

// TestSizes fails when a package, file or function of the product grows
// beyond the layout issue's limits (non-test code).
func TestSizes(t *testing.T) {
	pkgLines := map[string]int{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (path == "test" || d.Name() == "testdata" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Count(string(src), "\n")
		pkgLines[filepath.Dir(path)] += lines
		if lines > maxFileLines {
			t.Errorf("%s has %d lines (limit %d): split it by concern", path, lines, maxFileLines)
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFunctionLines && !onePiece(fd) {
				t.Errorf("%s: func %s has %d lines (limit %d): split it, or say in its doc comment why it must be one piece", path, fd.Name.Name, n, maxFunctionLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for d := range pkgLines {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if pkgLines[d] > maxPackageLines {
			t.Errorf("package %s has %d lines (limit %d)", d, pkgLines[d], maxPackageLines)
		}
	}
}

// onePiece reports whether a function's doc comment says why it must be one
// piece ("must be one piece").
func onePiece(fd *ast.FuncDecl) bool {
	return fd.Doc != nil && strings.Contains(fd.Doc.Text(), "must be one piece")
}
