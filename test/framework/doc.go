// Package framework runs deputy against a real kube-apiserver and etcd for the
// e2e and conformance suites: it builds or finds the binaries, starts deputy
// as a process (as an operator would), generates the kube-apiserver
// configuration with `deputy config apiserver`, and starts the control plane
// with controller-runtime's envtest. Everything listens on 127.0.0.1 and is
// stopped by the test, and nothing is left behind: the deputy binary it
// builds (without $DEPUTY_BIN) goes to bin/deputy-test at the repository
// root, kubectl caches in the run's temporary directory (UseKubectlCacheDir)
// instead of ~/.kube/cache, and a TestMain that only lists tests
// (ListingOnly) starts nothing.
package framework
