// Package manifests owns deputy's install YAML: the CustomResourceDefinitions
// (embedded from crds/, so the binary and tests use the very files an operator
// applies) and the kube-apiserver configuration that points a control plane at
// deputy (APIServerFiles: webhook kubeconfigs, the AuthorizationConfiguration
// and the ValidatingWebhookConfiguration, plus the operator's instructions).
//
// The kustomize base (base/), its cert-manager overlay (overlays/) and the
// control-plane files for kubeadm and kind (apiserver/) are plain files, not
// embedded; install_test.go holds them to this package and to package config,
// and test/e2e applies them to a real kube-apiserver.
//
// It only renders and writes files. It must not generate certificates (that is
// package certs), talk to a cluster, or decide policy.
package manifests
