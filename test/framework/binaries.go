package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// RepoRoot is the deputy repository root (the parent of test/).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS or bin/
// at the repository root (`make test-binaries` builds them there).
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make test-binaries` (or set KUBEBUILDER_ASSETS)", b, dir)
		}
	}
	return dir, nil
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// TestBinaryName is the deputy binary DeputyBinary builds into bin/ at the
// repository root (git-ignored), apart from bin/deputy, which `make build`
// writes and other runs may be using.
const TestBinaryName = "deputy-test"

// DeputyBinary returns $DEPUTY_BIN, or builds cmd/deputy once per test
// binary into bin/deputy-test at the repository root: never into the
// system's temporary directory, where every run would leave ~150 MB behind.
// The build goes to a temporary name in bin/ and is renamed into place, so
// that test packages building at the same time, or a run still executing
// the previous binary, never see a partial file.
func DeputyBinary() (string, error) {
	if p := os.Getenv("DEPUTY_BIN"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() {
		dir := filepath.Join(RepoRoot(), "bin")
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".%s-%d", TestBinaryName, os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/deputy")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			buildErr = fmt.Errorf("go build ./cmd/deputy: %v\n%s", err, out)
			return
		}
		buildPath = filepath.Join(dir, TestBinaryName)
		if err := os.Rename(tmp, buildPath); err != nil {
			_ = os.Remove(tmp)
			buildErr = err
		}
	})
	return buildPath, buildErr
}
