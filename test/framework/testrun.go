package framework

import (
	"flag"
	"os"
)

// ListingOnly reports whether the test binary was asked only to list its
// tests, benchmarks, fuzz targets and examples (`go test -list REGEXP`): a
// TestMain then starts nothing (no control plane, no deputy, no build) and
// returns m.Run(), which lists. Call it after flag.Parse.
func ListingOnly() bool {
	f := flag.Lookup("test.list")
	return f != nil && f.Value.String() != ""
}

// kubectlCacheEnv is the environment variable kubectl (k8s.io/cli-runtime)
// takes its cache directory from: discovery and HTTP caches, by default
// ~/.kube/cache.
const kubectlCacheEnv = "KUBECACHEDIR"

// UseKubectlCacheDir makes every kubectl the test process runs cache in dir
// (which the run removes) instead of ~/.kube/cache: Kubectl and any other
// child process, since it is set in the process environment. Call it from
// TestMain with a directory inside the run's temporary directory.
func UseKubectlCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Setenv(kubectlCacheEnv, dir)
}

// kubectlEnv is the environment of one kubectl run: the process's when
// UseKubectlCacheDir (or the caller) set KUBECACHEDIR; otherwise the
// process's plus KUBECACHEDIR set to a fresh directory, which done removes,
// so that no kubectl run leaves a cache in ~/.kube/cache.
func kubectlEnv() (env []string, done func(), err error) {
	if os.Getenv(kubectlCacheEnv) != "" {
		return nil, func() {}, nil // nil: the process's environment
	}
	dir, err := os.MkdirTemp("", "e2e-kubectl-cache-")
	if err != nil {
		return nil, nil, err
	}
	return append(os.Environ(), kubectlCacheEnv+"="+dir), func() { _ = os.RemoveAll(dir) }, nil
}
