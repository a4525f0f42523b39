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

// DeputyBinary returns $DEPUTY_BIN, or builds cmd/deputy once per test binary.
func DeputyBinary() (string, error) {
	if p := os.Getenv("DEPUTY_BIN"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deputy-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "deputy")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/deputy")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/deputy: %v\n%s", err, out)
		}
	})
	return buildPath, buildErr
}
