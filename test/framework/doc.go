// Package framework runs deputy against a real kube-apiserver and etcd for the
// e2e and conformance suites: it builds or finds the binaries, starts deputy
// as a process (as an operator would), generates the kube-apiserver
// configuration with `deputy config apiserver`, and starts the control plane
// with controller-runtime's envtest. Everything listens on 127.0.0.1 and is
// stopped by the test.
package framework
